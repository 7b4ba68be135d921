"""``rope_3d``: the 3-D RoPE of video diffusion transformers (Wan 2.1, HunyuanVideo, NVIDIA
Cosmos): the head split into temporal, height and width parts, each turned by its own
coordinate (:mod:`posenc.functional.video_rope` has the formulas and the published splits).

Positions are ``[seq, 3]`` or ``[batch, seq, 3]`` ``(t, h, w)`` coordinates, as
:func:`posenc.positions.video_grid` builds them (float with Cosmos's frame-rate scaling).
With ``grid=(frames, height, width)`` configured, the default positions are that grid's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..base import RotaryConfig, RotaryEncoding
from ..config import MAX_FLOAT, check_choice, check_device, check_float, check_int
from ..functional.mrope import mrope_axis, mrope_cos_sin
from ..functional.rope import ROPE_LAYOUTS
from ..functional.rope_kernel import rotate_checked
from ..functional.video_rope import video_axes_dim, video_rope_inv_freq
from ..positions.video import video_grid
from ..registry import register
from .inputs import check_rotate
from .rope import check_seq_len

__all__ = ["RoPE3D"]


@dataclasses.dataclass(frozen=True)
class RoPE3DConfig(RotaryConfig):
    """Configuration of :class:`RoPE3D`.

    Attributes:
        head_dim: size of each attention head (even).
        axes_dim: channels of each axis ``(t, h, w)``, even, summing to ``head_dim``;
            default Wan's and Cosmos's ``(d - 4⌊d/6⌋, 2⌊d/6⌋, 2⌊d/6⌋)``.
            HunyuanVideo: ``(16, 56, 56)``.
        base: the wavelength base θ of every axis: 10000 (Wan, Cosmos); HunyuanVideo 256.
        scale: per-axis NTK factor ``(t, h, w)`` (Cosmos's ``rope_scale``, e.g. ``(2, 1,
            1)``): ``θ_a = base · s_a^(d_a / (d_a - 2))``.
        layout: ``"interleaved"`` (Wan, HunyuanVideo) or ``"half"`` (Cosmos). Never guessed.
        grid: the default latent grid ``(frames, height, width)``, or None (pass positions).
    """

    head_dim: int
    axes_dim: tuple[int, int, int] | None = None
    base: float = 10000.0
    scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    layout: str = "interleaved"
    grid: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        check_int("head_dim", self.head_dim, minimum=6, even=True)
        set_ = object.__setattr__  # frozen: normalise once, here
        axes = video_axes_dim(self.head_dim) if self.axes_dim is None else self.axes_dim
        _check_triple("axes_dim", axes, "three ints (t, h, w)")
        for name, dim in zip(("t", "h", "w"), axes, strict=True):
            check_int(f"axes_dim {name}", dim, minimum=2, even=True)
        if sum(axes) != self.head_dim:
            raise ValueError(
                f"axes_dim {tuple(axes)} sums to {sum(axes)}, but head_dim is {self.head_dim}: "
                "the three parts must share out the head"
            )
        set_(self, "axes_dim", tuple(axes))
        check_float("base", self.base)
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        _check_triple("scale", self.scale, "three numbers (t, h, w)")
        for name, s, dim in zip(("t", "h", "w"), self.scale, axes, strict=True):
            check_float(f"scale {name}", s)
            if s != 1.0 and dim < 4:
                raise ValueError(f"scale {name}={s} needs at least 4 channels on that axis")
            _check_axis_base(name, self.base, s, dim)
        set_(self, "scale", tuple(float(s) for s in self.scale))
        check_choice("layout", self.layout, ROPE_LAYOUTS)
        if self.grid is not None:
            _check_triple("grid", self.grid, "(frames, height, width)")
            for name, n in zip(("frames", "height", "width"), self.grid, strict=True):
                check_int(f"grid {name}", n)
            set_(self, "grid", tuple(self.grid))


def _check_triple(name: str, value: Any, expected: str) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is an ordered sequence (a tuple or
    a list: a set has no ``(t, h, w)`` order), ``ValueError`` unless it holds three items."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be {expected} as a tuple or list, got {value!r}")
    if len(value) != 3:
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def _check_axis_base(name: str, base: float, scale: float, dim: int) -> None:
    """Raise ``ValueError`` naming the scale of axis ``name`` unless its effective base
    ``base · scale^(dim / (dim - 2))`` is, like ``base``, in ``(1, MAX_FLOAT]`` (worked out
    in logarithms: the power itself may overflow a float)."""
    if scale == 1.0:
        return
    log_base = math.log(base) + dim / (dim - 2) * math.log(scale)
    if not 0 < log_base <= math.log(MAX_FLOAT):
        raise ValueError(
            f"scale {name}={scale:g} gives axis {name} an effective base of base · scale^"
            f"({dim}/{dim - 2}) = {math.exp(min(log_base, 700.0)):g}, which must be > 1 and "
            f"<= {MAX_FLOAT:g} like base"
        )


@register(
    "rope_3d",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference=(
        "Wan 2.1 (arXiv:2503.20314); HunyuanVideo, Kong et al. 2024 (arXiv:2412.03603); "
        "NVIDIA Cosmos 2025 (arXiv:2501.03575)"
    ),
    summary="3-D RoPE of video latents: the head split into t, h, w parts, each its own RoPE",
    formula=(
        "pair i of axis a in (t, h, w) turns by p_a·θ_a^(−2i/d_a), i < d_a/2, θ_a = base·s_a^\n"
        "(d_a/(d_a−2)) (Cosmos's per-axis NTK; s_a = 1 for Wan, HunyuanVideo); pairs ordered\n"
        "t, h, w;  q'·k' depends on the offset (Δt, Δh, Δw) only"
    ),
)
class RoPE3D(RotaryEncoding):
    """3-D rotary position embedding of video latent tokens.

    No tables are stored: cos and sin come from the positions in float64, rounded once to
    float32, per forward.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq, 3]`` or ``[batch, seq, 3]`` ``(t, h, w)`` -> rotated q, k.

    Example:
        >>> import torch, posenc
        >>> rope = posenc.create("rope_3d", head_dim=24, grid=(2, 3, 4))
        >>> q = k = torch.randn(1, 2, 24, 24)
        >>> q2, k2 = rope(q, k)  # positions: posenc.positions.video_grid(2, 3, 4)
        >>> torch.equal(q2[:, :, 0], q[:, :, 0])  # (0, 0, 0) turns nothing
        True
    """

    Config = RoPE3DConfig
    config: RoPE3DConfig
    position_axes = 3

    def inv_freq(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The frequency of every pair, t pairs then h then w. Shapes: ``[head_dim // 2]``."""
        device = check_device(device)
        c = self.config
        assert c.axes_dim is not None  # resolved by the config
        return video_rope_inv_freq(c.axes_dim, c.base, c.scale, device)

    def default_positions(
        self, seq_len: int, device: torch.device | str | None = None, offset: int = 0
    ) -> torch.Tensor:
        """The configured grid's positions, when the sequence is that whole grid."""
        check_int("seq_len", seq_len, minimum=0)
        check_int("offset", offset, minimum=0)
        grid = self.config.grid
        if grid is None or offset or seq_len != grid[0] * grid[1] * grid[2]:
            raise ValueError(
                f"rope_3d has grid={grid}, so it has no default positions for {seq_len} "
                f"tokens{f' after {offset}' if offset else ''}: pass "
                "positions=posenc.positions.video_grid(frames, height, width)"
            )
        return video_grid(*grid, device=device)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """``(cos, sin)`` float32 (float64 for float64 positions), ``positions.shape[:-1] +
        (head_dim // 2,)``. ``seq_len`` changes nothing (no scaling depends on it) but is
        checked."""
        positions = self.check_positions(positions)
        check_seq_len(seq_len)
        c = self.config
        assert c.axes_dim is not None
        axis = mrope_axis([d // 2 for d in c.axes_dim], device=positions.device)
        ids = positions.movedim(-1, 0)  # [3, *s]
        return mrope_cos_sin(ids, self.inv_freq(positions.device), axis)

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` turned by ``rotation``, this encoding's ``(cos, sin)`` of its positions
        (``key`` changes nothing, but must be a bool); checked by shapes only, as
        :meth:`RoPE.rotate <posenc.rotary.rope.RoPE.rotate>`.

        Shapes:
            x ``[batch, heads, seq, head_dim]``, cos and sin ``[seq, head_dim // 2]`` or
            ``[batch or 1, seq, head_dim // 2]`` -> the same as x, its dtype.
        """
        width = self.head_dim // 2
        cos, sin = check_rotate(self, x, rotation, key, width=width, heads=(None, None))
        return rotate_checked(x, cos, sin, self.config.layout)
