"""Positions: how each token's place is given to an encoding, checked and defaulted.

Positions are explicit tensors: ``[seq]`` (shared by the batch) or ``[batch, seq]`` (a
different offset per sequence, KV-cache decoding). Encodings of image grids take one
coordinate pair per token instead: ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column), as
:func:`grid` builds them; M-RoPE takes Hugging Face's ``[3, batch, seq]`` (see
:func:`multimodal`). They set the encoding and the causal mask (``k_position <=
q_position``) only; padding and packed documents have masks of their own
(``key_padding_mask``, ``segment_ids`` in :func:`posenc.attention`), and
:func:`from_padding` and :func:`from_segments` give their positions. Integer and
fractional positions are both accepted where the encoding is defined for them; anything
else is an error that names the parameter, never a silent clamp or wrap.

One module per concept: :mod:`~posenc.positions.checks` (validation, defaults, the causal
mask), :mod:`~posenc.positions.grid` (image grids and the grid encodings' mixin),
:mod:`~posenc.positions.video` (the ``(t, h, w)`` of video latent tokens),
:mod:`~posenc.positions.multimodal` (M-RoPE ids of text with images and videos, the
checks of its inputs in :mod:`~posenc.positions.multimodal_inputs`),
:mod:`~posenc.positions.tmrope` (TMRoPE ids of text with images, videos and audio on one
clock, Qwen-Omni),
:mod:`~posenc.positions.padding` (padded and packed batches) and
:mod:`~posenc.positions.record` (the positions of one attention call, and the default
that places queries last among the keys) and :mod:`~posenc.positions.samplers` (the
positions a training row is shown at: randomized, PoSE). Import the names from
``posenc.positions``.
"""

from .checks import (
    PositionOutOfRangeError,
    arange,
    causal_mask,
    check_batch,
    check_positions,
    position_at,
)
from .grid import GridMixin, check_grid, check_grid_config, grid, grid_default_positions
from .multimodal import multimodal
from .padding import (
    check_padding_mask,
    check_segment_ids,
    document_starts,
    from_padding,
    from_segments,
)
from .record import AttnPositions, query_offset
from .samplers import SAMPLERS, PositionSampler, pose, randomized
from .tmrope import tmrope
from .video import video_grid

__all__ = [
    "SAMPLERS",
    "AttnPositions",
    "GridMixin",
    "PositionOutOfRangeError",
    "PositionSampler",
    "arange",
    "causal_mask",
    "check_batch",
    "check_grid",
    "check_grid_config",
    "check_padding_mask",
    "check_positions",
    "check_segment_ids",
    "document_starts",
    "from_padding",
    "from_segments",
    "grid",
    "grid_default_positions",
    "multimodal",
    "pose",
    "position_at",
    "query_offset",
    "randomized",
    "tmrope",
    "video_grid",
]
