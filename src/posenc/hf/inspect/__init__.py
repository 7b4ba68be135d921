"""What a checkpoint's ``config.json`` says about its positions:
:func:`posenc.hf.inspect_checkpoint`.

- :mod:`~posenc.hf.inspect.checkpoint`: the report (:class:`CheckpointReport`);
- :mod:`~posenc.hf.inspect.model_types`: the model types it knows and the posenc encoding
  of each (rotary, ALiBi, T5 buckets, learned);
- :mod:`~posenc.hf.inspect.plans`: the extension plans of a report, what
  ``extend_context`` would write for each method and the RoPE that gives;
- :mod:`~posenc.hf.inspect.windows`: what the windows and chunks of a layer plan mean for
  the distances its RoPE layers see, and for the plans;
- :mod:`~posenc.hf.inspect.table`: a layer plan as a short table, one row per kind of
  layer, no wider than the terminal;
- :mod:`~posenc.hf.inspect.view`: the report shown, :func:`render_report` (text) and
  :func:`frequencies_figure` (matplotlib, imported there only).
"""

from .checkpoint import CheckpointReport, inspect_checkpoint
from .view import frequencies_figure, render_report

__all__ = ["CheckpointReport", "frequencies_figure", "inspect_checkpoint", "render_report"]
