"""The checks on the inputs of :func:`~posenc.positions.multimodal` and
:func:`~posenc.positions.tmrope`: token ids, the kept tokens, the items' patch grids and the
videos' temporal id steps (Qwen2-VL, Qwen2.5-VL) or seconds per patch (Qwen-Omni).

Each raises a ``TypeError`` or ``ValueError`` that names the argument.
"""

from __future__ import annotations

from typing import Any

import torch

from ..arguments import check_tensor, check_values
from ..config import MAX_POSITION, check_float, check_int

__all__ = [
    "check_distinct_ids",
    "check_grid_thw",
    "check_ids",
    "intervals",
    "kept_tokens",
    "real_numbers",
    "seconds_per_grid",
]


#: what reads the values of the inputs, for the refusal of a meta tensor
READER = "the multimodal position ids (computed from the token ids and grids)"


def real_numbers(name: str, value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``value``, a tensor or Python numbers (made a tensor of ``dtype``), as a tensor of
    real numbers, or a ``TypeError`` naming ``name``: never torch's error for a string."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, dtype=dtype)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be real numbers (a tensor or a list of floats), got {value!r}"
            ) from None
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name} must be real numbers, got {value.dtype}")
    check_values(name, value, READER)
    return value


def check_ids(
    input_ids: Any, image_token_id: int, video_token_id: int, vision_start: int | None
) -> None:
    """Raise unless ``input_ids`` is an integer ``[batch, seq]`` tensor and the token ids
    are distinct integers >= 0."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dtype == torch.bool or input_ids.is_floating_point() or input_ids.is_complex():
        raise TypeError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
    check_values("input_ids", input_ids, READER)
    for name, value in (("image_token_id", image_token_id), ("video_token_id", video_token_id)):
        check_int(name, value, minimum=0)
    if vision_start is not None:
        check_int("vision_start_token_id", vision_start, minimum=0)
    if image_token_id == video_token_id:
        raise ValueError(f"image_token_id and video_token_id are both {image_token_id}")


def kept_tokens(attention_mask: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """``[batch, seq]`` bool: the tokens ``attention_mask`` keeps (all without one)."""
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    check_tensor("attention_mask", attention_mask, kinds=("bool", "int", "float"))
    check_values("attention_mask", attention_mask, READER)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 and 1")
    return attention_mask.to(input_ids.device).bool()


def check_grid_thw(name: str, grid: Any, merge: int, device: torch.device) -> torch.Tensor:
    """``[n, 3]`` merged (t, h, w) sizes of the items of one modality, validated."""
    if grid is None:
        return torch.zeros(0, 3, dtype=torch.long, device=device)
    if not isinstance(grid, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor [n, 3], got {type(grid).__name__}")
    if grid.dtype == torch.bool or grid.is_floating_point() or grid.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got {grid.dtype}")
    if grid.dim() != 2 or grid.shape[1] != 3:
        raise ValueError(f"{name} must be [n, 3] (t, h, w per item), got {tuple(grid.shape)}")
    check_values(name, grid, READER)
    grid = grid.to(device, torch.long)
    if grid.numel() and bool((grid < 1).any()):
        raise ValueError(f"{name} entries must be >= 1, got {grid.tolist()}")
    if bool((grid[:, 1:] % merge != 0).any()):
        raise ValueError(
            f"{name} heights and widths must be multiples of spatial_merge_size={merge} "
            f"(patches before merging), got {grid.tolist()}"
        )
    return torch.cat((grid[:, :1], grid[:, 1:] // merge), dim=1)


def intervals(
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
    # Python numbers: float64 for exact ids, float32 as a processor's tensor would be
    seconds = real_numbers("second_per_grid_ts", second_per_grid_ts, dtype)
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


def check_distinct_ids(tokens: dict[str, Any]) -> None:
    """Raise unless the named token ids are integers >= 0, no two the same."""
    for name, value in tokens.items():
        check_int(name, value, minimum=0)
    if len(set(tokens.values())) != len(tokens):
        raise ValueError(f"the token ids must differ, got {tokens}")


def seconds_per_grid(seconds: Any, n_videos: int) -> torch.Tensor:
    """``[n_videos]`` seconds per temporal patch (Qwen-Omni's ``second_per_grids``), float32
    as transformers multiplies them; required when there are videos."""
    if seconds is None:
        if n_videos:
            raise ValueError(
                "video_grid_thw given without second_per_grids: TMRoPE places frames by "
                "time, so each video needs its seconds per temporal patch"
            )
        return torch.zeros(0)
    values = real_numbers("second_per_grids", seconds).detach().cpu()
    if values.dim() != 1:
        raise ValueError(f"second_per_grids must be [n_videos] real numbers, got {values!r}")
    if values.numel() != n_videos:
        raise ValueError(
            f"second_per_grids has {values.numel()} values for {n_videos} videos "
            "(video_grid_thw rows)"
        )
    values = values.float()
    if n_videos and not bool((torch.isfinite(values) & (values > 0)).all()):
        raise ValueError(f"second_per_grids must be finite and > 0, got {values.tolist()}")
    return values
