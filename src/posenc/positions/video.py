"""The positions of a video's latent tokens: ``(t, h, w)`` per token, frames outermost, as
the video diffusion transformers flatten their patches."""

from __future__ import annotations

import torch

from ..config import MAX_INT, check_device, check_float, check_int

__all__ = ["video_grid"]


def video_grid(
    frames: int,
    height: int,
    width: int,
    *,
    fps: float | None = None,
    base_fps: float = 24.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(t, h, w)`` of every token of a ``frames × height × width`` latent grid, row-major
    (frame, then row, then column). With ``fps``, the temporal coordinate is the frame
    index times ``base_fps / fps`` (Cosmos's frame-rate scaling: one second spans the same
    angle at any frame rate) and the positions are float64; else int64 indices.

    Shapes:
        returns ``[frames · height · width, 3]``

    Example:
        >>> video_grid(2, 1, 2).tolist()
        [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1]]
    """
    for name, value in (("frames", frames), ("height", height), ("width", width)):
        check_int(name, value)
    if frames * height * width > MAX_INT:
        raise ValueError(
            f"frames · height · width = {frames * height * width} tokens, more than {MAX_INT}"
        )
    if fps is not None:
        check_float("fps", fps)  # > 0
    check_float("base_fps", base_fps)  # checked without fps too: a typo is never ignored
    device = check_device(device)
    axes = [torch.arange(n, device=device) for n in (frames, height, width)]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)
    if fps is None:
        return grid
    scaled = grid.to(torch.float64)
    scaled[:, 0] *= base_fps / fps
    return scaled
