"""The runners: one file each, one signature, one registry.

A runner computes one attention call the way its file says:
``run(call: Call, plan: Plan) -> [batch, heads, q_len, head_dim]``, with ``call`` the
checked inputs (:class:`~posenc.attn.call.Call`) and ``plan`` what
:func:`~posenc.attn.planner.plan` chose (the runner's name, the table it needs, the fused
path's slopes). :data:`RUNNERS` maps the names the plan gives to them; a new runner is a
file here and one row of :data:`~posenc.attn.planner.ROWS`.

- :mod:`~posenc.attn.runners.fast`: SDPA with its own causal mask (no bias, no masks);
- :mod:`~posenc.attn.runners.sdpa`: SDPA with the dense mask and the materialised bias;
- :mod:`~posenc.attn.runners.math`: the softmax written out in float32: softcap, sinks,
  a value term, inputs that are not finite;
- :mod:`~posenc.attn.runners.flex`: compiled flex attention with a ``score_mod`` and the
  block mask;
- :mod:`~posenc.attn.runners.scores`: a bias of each row's scores (CoPE), by blocks of rows;
- :mod:`~posenc.attn.runners.weights`: weights that are not a softmax (stick-breaking),
  by blocks of rows;
- :mod:`~posenc.attn.runners.path`: scores through transforms of the layer's input (PaTH),
  by blocks of rows;
- :mod:`~posenc.attn.runners.shaw`: Shaw's relative attention blockwise, forward and
  backward (CPU);
- :mod:`~posenc.attn.runners.linear`: a bias linear in the distance (ALiBi) fused into
  CPU SDPA;
- :mod:`~posenc.attn.runners.distance`: a shift-invariant bias from its ``2L - 1``
  distances, blockwise (CPU);
- :mod:`~posenc.attn.runners.rows`: a bias of the positions computed a block of rows at a
  time (FIRE, CPU);
- :mod:`~posenc.attn.runners.flash`: a bias table that trains on the CPU flash kernel with
  a blockwise backward.

The kernels several of them share are in :mod:`posenc.attn.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from . import distance, fast, flash, flex, linear, math, path, rows, scores, sdpa, shaw, weights

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["RUNNERS", "Runner"]

#: ``run(call, plan) -> output``: the one signature of a runner
Runner = Callable[["Call", "Plan"], torch.Tensor]

#: the runners by the name :func:`~posenc.attn.planner.plan` gives them
RUNNERS: dict[str, Runner] = {
    "fast": fast.fast,
    "sdpa": sdpa.sdpa,
    "math": math.math,
    "flex": flex.flex,
    "scores": scores.scores,
    "weights": weights.weights,
    "path": path.path,
    "shaw": shaw.shaw,
    "linear": linear.linear,
    "distance": distance.distance,
    "rows": rows.rows,
    "flash": flash.flash,
}
