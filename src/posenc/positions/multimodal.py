"""Position ids of text mixed with images and videos, for M-RoPE (Qwen2-VL).

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
from typing import Any

import torch

from ..config import MAX_POSITION, check_float, check_int

__all__ = ["multimodal"]


def _grid(name: str, grid: Any, merge: int, device: torch.device) -> torch.Tensor:
    """``[n, 3]`` merged (t, h, w) sizes of the items of one modality, validated."""
    if grid is None:
        return torch.zeros(0, 3, dtype=torch.long, device=device)
    if not isinstance(grid, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor [n, 3], got {type(grid).__name__}")
    if grid.dtype == torch.bool or grid.is_floating_point() or grid.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got {grid.dtype}")
    if grid.dim() != 2 or grid.shape[1] != 3:
        raise ValueError(f"{name} must be [n, 3] (t, h, w per item), got {tuple(grid.shape)}")
    grid = grid.to(device, torch.long)
    if grid.numel() and bool((grid < 1).any()):
        raise ValueError(f"{name} entries must be >= 1, got {grid.tolist()}")
    if bool((grid[:, 1:] % merge != 0).any()):
        raise ValueError(
            f"{name} heights and widths must be multiples of spatial_merge_size={merge} "
            f"(patches before merging), got {grid.tolist()}"
        )
    return torch.cat((grid[:, :1], grid[:, 1:] // merge), dim=1)


def _intervals(
    second_per_grid_ts: Any,
    tokens_per_second: Any,
    n_videos: int,
    exact: bool,
    device: torch.device,
) -> torch.Tensor:
    """Temporal id step of each video: ``second_per_grid_t · tokens_per_second``, float32 as
    transformers computes it (float64 with ``exact``); 1 (Qwen2-VL) without them."""
    dtype = torch.float64 if exact else torch.float32
    if tokens_per_second is not None:
        check_float("tokens_per_second", tokens_per_second)
    if second_per_grid_ts is None:
        step = 1 if tokens_per_second is None else tokens_per_second
        return torch.full((n_videos,), step, dtype=dtype, device=device)
    if tokens_per_second is None:
        raise ValueError(
            "second_per_grid_ts needs tokens_per_second (the vision config's temporal ids "
            "per second, e.g. 2 for Qwen2.5-VL)"
        )
    if isinstance(second_per_grid_ts, torch.Tensor):
        seconds = second_per_grid_ts
    else:  # Python numbers: float64 for exact ids, float32 as a processor's tensor would be
        seconds = torch.as_tensor(second_per_grid_ts, dtype=dtype)
    if seconds.dtype == torch.bool or seconds.is_complex():
        raise TypeError(f"second_per_grid_ts must be real numbers, got {seconds.dtype}")
    if seconds.dim() != 1 or seconds.numel() != n_videos:
        raise ValueError(
            f"second_per_grid_ts must be [n_videos] with one value per video ({n_videos}), "
            f"got shape {tuple(seconds.shape)}"
        )
    # float32 like the processor's tensor that transformers multiplies (float64 if exact)
    seconds = seconds.to(device, dtype)
    if n_videos and not bool((torch.isfinite(seconds) & (seconds > 0)).all()):
        raise ValueError(f"second_per_grid_ts must be finite and > 0, got {seconds.tolist()}")
    steps = seconds * tokens_per_second
    if n_videos and not float(steps.max()) <= MAX_POSITION:  # inf in float32 too
        raise ValueError(
            f"second_per_grid_ts * tokens_per_second must be <= {MAX_POSITION} (2**53, the "
            f"largest position), got {float(steps.max()):g}"
        )
    return steps


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
            Qwen3-VL puts a timestamp before each frame and numbers frames as separate
            items: pass one row ``(1, h, w)`` per frame, as its ``get_rope_index`` splits
            them (``grid.repeat_interleave(grid[:, 0], 0)`` with t set to 1).
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
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dtype == torch.bool or input_ids.is_floating_point() or input_ids.is_complex():
        raise TypeError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
    for name, value in (("image_token_id", image_token_id), ("video_token_id", video_token_id)):
        check_int(name, value, minimum=0)
    if vision_start_token_id is not None:
        check_int("vision_start_token_id", vision_start_token_id, minimum=0)
    if image_token_id == video_token_id:
        raise ValueError(f"image_token_id and video_token_id are both {image_token_id}")
    check_int("spatial_merge_size", spatial_merge_size)
    if not isinstance(exact_time, bool):
        raise TypeError(f"exact_time must be a bool, got {exact_time!r}")
    device = input_ids.device
    batch, seq = input_ids.shape
    if attention_mask is None:
        mask = torch.ones_like(input_ids, dtype=torch.bool)
    else:
        if not isinstance(attention_mask, torch.Tensor):
            raise TypeError(
                f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}"
            )
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must hold only 0 and 1")
        mask = attention_mask.to(device).bool()

    # Work on each sequence with its padding removed: the kept tokens first, in order.
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # [b, s]
    lengths = mask.sum(dim=1)  # [b]
    ids = input_ids.gather(1, order)  # [b, s]: kept tokens, then padding
    kept = torch.arange(seq, device=device) < lengths[:, None]  # [b, s]

    dtype = torch.float64 if exact_time else torch.long
    offsets = torch.zeros(3, batch, seq, dtype=dtype, device=device)  # (τ, j, k) in an item
    advance = kept.to(dtype)  # how far the next id moves past each token: text 1, pad 0
    images = _grid("image_grid_thw", image_grid_thw, spatial_merge_size, device)
    videos = _grid("video_grid_thw", video_grid_thw, spatial_merge_size, device)
    if second_per_grid_ts is not None and video_grid_thw is None:
        raise ValueError("second_per_grid_ts given without video_grid_thw")
    steps = _intervals(second_per_grid_ts, tokens_per_second, len(videos), exact_time, device)
    image_steps = torch.ones(len(images), dtype=steps.dtype, device=device)  # frames 1 apart
    modalities = (
        ("image", image_token_id, images, image_steps),
        ("video", video_token_id, videos, steps),
    )
    for modality, token_id, grid, step in modalities:
        is_item = (ids == token_id) & kept  # [b, s]
        flat = is_item.flatten().nonzero().squeeze(1)  # flat indices b * seq + i, in order
        sizes = grid.prod(dim=1)  # tokens per item
        grid_name = f"{modality}_grid_thw"
        if flat.numel() != int(sizes.sum()):
            raise ValueError(
                f"input_ids hold {flat.numel()} {modality} tokens ({modality}_token_id="
                f"{token_id}) but {grid_name} describes {int(sizes.sum())} "
                f"(t*h*w / spatial_merge_size**2 per {modality}: {sizes.tolist()})"
            )
        if flat.numel() == 0:
            continue
        ends = sizes.cumsum(0)
        starts = ends - sizes
        rank = torch.arange(flat.numel(), device=device)
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
        if vision_start_token_id is not None:
            col = first % seq
            before = ids.flatten()[(first - 1).clamp(min=0)]
            wrong = (col == 0) | (before != vision_start_token_id)
            if bool(wrong.any()):
                bad = int(wrong.nonzero()[0])
                raise ValueError(
                    f"{modality} {bad} does not follow vision_start_token_id="
                    f"{vision_start_token_id}"
                )
        # frame, row and column of each token inside its item (frame-major, then rows)
        local = rank - starts[item]
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
        offsets[0].view(-1)[flat] = tau.to(dtype)
        offsets[1].view(-1)[flat] = row.to(dtype)
        offsets[2].view(-1)[flat] = col.to(dtype)
        # the item's last token moves the next id past the item's largest id
        # (rounded up for exact fractional ids: text stays on whole ids, >= 1 past the item)
        extent = torch.maximum(tau.ceil() if exact_time else tau, torch.maximum(row, col)) + 1
        moves = torch.where(local == sizes[item] - 1, extent.to(dtype), 0)
        advance.view(-1)[flat] = moves

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
