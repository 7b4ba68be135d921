"""Position ids of text mixed with images and videos, for M-RoPE (Qwen2-VL and its kin).

Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191; Bai et al. 2025, "Qwen2.5-VL",
arXiv:2502.13923. Each token gets three ids (temporal, height, width), ``[3, batch, seq]``:

- a text token gets the next id on all three axes (so text alone is ``arange``);
- the ``t·h·w`` tokens of an image or video (its ``(t, h, w)`` grid of patches after the
  vision encoder merges ``spatial_merge_size²`` patches into one token: ``h`` and ``w`` here
  are the merged sizes) get ``(s + τ(i), s + j, s + k)`` for frame i, row j, column k, in
  frame, row, column order, where ``s`` is the id the next text token would have had;
- text after an image or video resumes at the largest id used so far plus one.

Frames are one id apart (``τ(i) = i``), except for videos of Qwen2.5-VL, whose temporal
ids follow time: ``τ(i) = ⌊i · second_per_grid_t · tokens_per_second⌋`` (seconds per
temporal patch times ids per second), computed in float32 and truncated as transformers
does; ``exact_time=True`` keeps ``i · second_per_grid_t · tokens_per_second`` unrounded
(float64 ids; RoPE rotates by any real position).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..config import MAX_POSITION, check_int
from .multimodal_inputs import check_grid_thw, check_ids, intervals, kept_tokens

__all__ = ["multimodal"]


def multimodal(
    input_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    *,
    image_token_id: int,
    video_token_id: int,
    vision_start_token_id: int | None = None,
    spatial_merge_size: int = 2,
    attention_mask: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | Sequence[float] | None = None,
    tokens_per_second: float | None = None,
    exact_time: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE position ids ``[3, batch, seq]`` of a batch of text, images and videos.

    The rules are in the module docstring. The arguments are named as in transformers'
    Qwen2-VL / Qwen2.5-VL configs and processor outputs, so they can be passed straight on.
    The ids equal transformers' ``get_rope_index`` (transformers 5) except after a video
    whose temporal ids outrun its height and width ids (frames > merged rows and columns,
    or Qwen2.5-VL time steps): there text resumes at the largest id plus one, as in the
    paper and the original Qwen code, where transformers 5 resumes at the start plus
    ``max(h, w)``, overlapping the video's temporal ids.

    Args:
        input_ids: ``[batch, seq]`` token ids, one token per merged patch of each image
            (``image_token_id``) or video (``video_token_id``).
        image_grid_thw, video_grid_thw: ``[n, 3]`` (t, h, w) patch grids before merging,
            one row per image / video in order of appearance, the batch's rows in turn.
            Qwen3-VL and GLM-4V put a timestamp before each frame and number frames as
            separate items: pass one row ``(1, h, w)`` per frame, as their
            ``get_rope_index`` splits them (``grid.repeat_interleave(grid[:, 0], 0)`` with
            t set to 1). ERNIE-4.5-VL merges ``temporal_merge_size`` frames into one
            temporal patch: pass its grid with t divided by it.
        image_token_id, video_token_id: the placeholder token ids.
        vision_start_token_id: if given, every image and video must directly follow this
            token (Qwen's ``<|vision_start|>``): a check of the input, nothing else.
        spatial_merge_size: patches merged per side into one token.
        attention_mask: ``[batch, seq]`` of 0/1: tokens at 0 (padding, left or right) are
            skipped, the others numbered as if they stood alone, and padding gets id 0, as
            in transformers 5 (4.x gave it 1; attention masks them either way).
        second_per_grid_ts: ``[n_videos]`` seconds per temporal patch (Qwen2.5-VL's
            processor output); needs ``tokens_per_second``. Fractional values count: 0.5 s
            at 2 ids per second steps by 1, never 0 (one release converted the seconds to
            integers first).
        tokens_per_second: Qwen2.5-VL's vision config value; without
            ``second_per_grid_ts`` every video steps by it (1 second per patch), as in
            transformers.
        exact_time: keep video temporal ids unrounded (float64 ids, from float64 seconds
            when they are given as Python numbers); the text after a video resumes at its
            largest id rounded up, plus one, so text ids stay whole numbers.

    Returns:
        ``(position_ids, deltas)``: ``[3, batch, seq]`` int64 (float64 with
        ``exact_time``), and ``[batch, 1]`` int64 ``max id + 1 - length`` per sequence
        (transformers' ``rope_deltas``): token n >= length of a continuation is at id
        ``n + delta`` on every axis.

    Raises:
        TypeError, ValueError: naming the argument: shapes, dtypes, token counts that do
            not match the grids (``t·h·w / spatial_merge_size²`` tokens per item), items
            split by other tokens or across sequences.

    Example:
        >>> ids = torch.tensor([[5, 6] + [7] * 8 + [5]])  # text, 2 frames of 2x2 tokens, text
        >>> positions, deltas = multimodal(ids, video_grid_thw=torch.tensor([[2, 4, 4]]),
        ...     image_token_id=8, video_token_id=7, second_per_grid_ts=torch.tensor([0.5]),
        ...     tokens_per_second=2)
        >>> positions[:, 0].tolist()
        [[0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4],
         [0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 4],
         [0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4]]
        >>> deltas.tolist()
        [[-6]]
    """
    check_ids(input_ids, image_token_id, video_token_id, vision_start_token_id)
    check_int("spatial_merge_size", spatial_merge_size)
    if not isinstance(exact_time, bool):
        raise TypeError(f"exact_time must be a bool, got {exact_time!r}")
    device = input_ids.device
    batch, seq = input_ids.shape
    mask = kept_tokens(attention_mask, input_ids)

    # Work on each sequence with its padding removed: the kept tokens first, in order.
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # [b, s]
    lengths = mask.sum(dim=1)  # [b]
    ids = input_ids.gather(1, order)  # [b, s]: kept tokens, then padding
    kept = torch.arange(seq, device=device) < lengths[:, None]  # [b, s]

    dtype = torch.float64 if exact_time else torch.long
    offsets = torch.zeros(3, batch, seq, dtype=dtype, device=device)  # (τ, j, k) in an item
    advance = kept.to(dtype)  # how far the next id moves past each token: text 1, pad 0
    images = check_grid_thw("image_grid_thw", image_grid_thw, spatial_merge_size, device)
    videos = check_grid_thw("video_grid_thw", video_grid_thw, spatial_merge_size, device)
    if second_per_grid_ts is not None and video_grid_thw is None:
        raise ValueError("second_per_grid_ts given without video_grid_thw")
    steps = intervals(second_per_grid_ts, tokens_per_second, len(videos), exact_time, device)
    image_steps = torch.ones(len(images), dtype=steps.dtype, device=device)  # frames 1 apart
    for item in (
        _Items("image", image_token_id, images, image_steps),
        _Items("video", video_token_id, videos, steps),
    ):
        flat, index, local = _locate(item, ids, kept, vision_start_token_id)
        if flat.numel():
            _place(item, flat, index, local, offsets, advance, exact_time)

    largest = float(advance.double().sum(dim=1).max()) if advance.numel() else 0.0
    if largest > MAX_POSITION:  # checked before int64 sums could wrap
        raise ValueError(
            f"the position ids reach {largest:g}, past {MAX_POSITION} (2**53, the largest "
            "position): the videos' temporal ids (second_per_grid_ts * tokens_per_second) "
            "are too large"
        )
    start = advance.cumsum(dim=1) - advance  # [b, s]: the id where each token's unit begins
    compact = (start + offsets) * kept  # [3, b, s]; padding 0
    positions = torch.zeros_like(compact).scatter_(2, order.expand(3, -1, -1), compact)
    deltas = (advance.sum(dim=1) - lengths).long().unsqueeze(1)  # [b, 1]
    return positions, deltas


class _Items(NamedTuple):
    """The images or the videos of a batch: their placeholder token, merged ``[n, 3]``
    grids and temporal id steps ``[n]``."""

    modality: str
    token_id: int
    grid: torch.Tensor
    step: torch.Tensor


def _locate(
    items: _Items, ids: torch.Tensor, kept: torch.Tensor, vision_start: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The flat indices (``b * seq + i``, in order) of the items' tokens and, for each, the
    item it belongs to and its rank inside it; raises unless each item is one run of its
    token in one sequence whose size its grid gives (after ``vision_start`` when given)."""
    modality, token_id, grid, _ = items
    seq = ids.shape[1]
    flat = ((ids == token_id) & kept).flatten().nonzero().squeeze(1)  # [n_tokens]
    sizes = grid.prod(dim=1)  # tokens per item
    grid_name = f"{modality}_grid_thw"
    if flat.numel() != int(sizes.sum()):
        raise ValueError(
            f"input_ids hold {flat.numel()} {modality} tokens ({modality}_token_id="
            f"{token_id}) but {grid_name} describes {int(sizes.sum())} "
            f"(t*h*w / spatial_merge_size**2 per {modality}: {sizes.tolist()})"
        )
    ends = sizes.cumsum(0)
    starts = ends - sizes
    rank = torch.arange(flat.numel(), device=ids.device)
    item = torch.searchsorted(ends, rank, right=True)  # the item each token belongs to
    first, last = flat[starts], flat[ends - 1]
    split = (last - first + 1 != sizes) | (first // seq != last // seq)
    if bool(split.any()):
        bad = int(split.nonzero()[0])
        raise ValueError(
            f"{modality} {bad} ({int(sizes[bad])} tokens by {grid_name}) is not one run of "
            f"{modality}_token_id in one sequence: the token counts do not match the "
            "grids, or other tokens interrupt it"
        )
    if vision_start is not None:
        before = ids.flatten()[(first - 1).clamp(min=0)]
        wrong = (first % seq == 0) | (before != vision_start)
        if bool(wrong.any()):
            bad = int(wrong.nonzero()[0])
            raise ValueError(
                f"{modality} {bad} does not follow vision_start_token_id={vision_start}"
            )
    return flat, item, rank - starts[item]


def _place(
    items: _Items,
    flat: torch.Tensor,
    item: torch.Tensor,
    local: torch.Tensor,
    offsets: torch.Tensor,
    advance: torch.Tensor,
    exact_time: bool,
) -> None:
    """Write each item token's (τ, row, column) into ``offsets`` ``[3, b, s]`` and, at each
    item's last token, how far the next id moves into ``advance`` ``[b, s]``."""
    modality, _, grid, step = items
    sizes = grid.prod(dim=1)
    # frame, row and column of each token inside its item (frame-major, then rows)
    h, w = grid[item, 1], grid[item, 2]
    frame, row, col = local // (h * w), (local // w) % h, local % w
    # float32 product truncated to an integer, as transformers computes it (float64 kept
    # as it is with exact_time)
    tau = frame.to(step.dtype) * step[item]
    if not float(tau.max()) <= MAX_POSITION:
        raise ValueError(
            f"{modality} temporal ids reach {float(tau.max()):g}, past {MAX_POSITION} "
            "(2**53, the largest position): frames * second_per_grid_ts * "
            "tokens_per_second is too large"
        )
    if not exact_time:
        tau = tau.long()
    dtype = offsets.dtype
    for axis, value in enumerate((tau, row, col)):
        offsets[axis].view(-1)[flat] = value.to(dtype)
    # the item's last token moves the next id past the item's largest id
    # (rounded up for exact fractional ids: text stays on whole ids, >= 1 past the item)
    extent = torch.maximum(tau.ceil() if exact_time else tau, torch.maximum(row, col)) + 1
    advance.view(-1)[flat] = torch.where(local == sizes[item] - 1, extent.to(dtype), 0)
