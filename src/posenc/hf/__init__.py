"""Hugging Face interop: read a model's RoPE from its config, extend a loaded model's context.

One module per concept:

- :mod:`~posenc.hf.rope`: :func:`rope_from_hf_config`, a transformers config (the object
  or its ``config.json`` dict) as the :class:`~posenc.rotary.RoPE` that reproduces the
  model's rotary embedding;
- :mod:`~posenc.hf.extend`: :func:`extend_context`, a loaded causal LM (Llama family)
  rewritten for a longer context with one of the published scalings;
- :mod:`~posenc.hf.keys`: reading a config's keys, object or dict;
- :mod:`~posenc.hf.inspect`: :func:`inspect_checkpoint`, what a checkpoint's ``config.json``
  says about its positions (and what ``extend_context`` would do to reach a length), shown by
  :func:`render_report` and :func:`frequencies_figure` (:mod:`~posenc.hf.inspect_view`).

:func:`permute_for_layout` (the q/k weight permutation between Meta's interleaved pairs and
Hugging Face's halves) lives in :mod:`posenc.rotary.layouts` and is re-exported here.

transformers is optional: nothing here imports it, so ``import posenc.hf`` works without it.
Both functions duck-type the config and the model. Import the names from ``posenc.hf``.
"""

from ..rotary.layouts import permute_for_layout
from .extend import EXTEND_METHODS, extend_context, extension_updates
from .inspect import CheckpointReport, inspect_checkpoint
from .inspect_view import frequencies_figure, render_report
from .rope import rope_from_hf_config

__all__ = [
    "EXTEND_METHODS",
    "CheckpointReport",
    "extend_context",
    "extension_updates",
    "frequencies_figure",
    "inspect_checkpoint",
    "permute_for_layout",
    "render_report",
    "rope_from_hf_config",
]
