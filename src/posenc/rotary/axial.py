"""Rotary encodings of image patch grids: ``rope_2d`` (axial) and ``rope_mixed`` (Heo et al.
2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298).

Both rotate queries and keys by angles linear in the patch coordinates (row y, column x), so
attention scores between two patches depend on their offset (dy, dx) only. ``rope_2d`` gives
half of the pairs to x and half to y with fixed frequencies; ``rope_mixed`` learns one
frequency pair (f_x, f_y) per head and rotary pair. The math is in
:mod:`posenc.functional.axial_rope`.

Positions are ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column) coordinates, one per token,
prefix tokens included, as :func:`posenc.positions.grid` builds them (integer indices, or
patch centres in [-1, 1] with ``normalize=True``). Prefix tokens (class, registers) sit at
(0, 0), where the rotation is the identity. With ``grid=(h, w)`` configured, the default
positions are those of that grid.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from ..base import RotaryConfig, RotaryEncoding
from ..config import check_choice, check_float, check_int
from ..functional.axial_rope import (
    AXIS_ORDERS,
    axial_rope_cos_sin,
    axial_rope_inv_freq,
    rope_mixed_cos_sin,
    rope_mixed_freqs,
)
from ..functional.rope import ROPE_LAYOUTS
from ..functional.rope_kernel import rotate_checked
from ..positions import GridMixin, check_grid_config
from ..registry import register
from .inputs import check_rotate
from .rope import check_seq_len

__all__ = ["RoPE2D", "RoPEMixed"]

REFERENCE = "Heo et al. 2024, Rotary Position Embedding for Vision Transformer, arXiv:2403.13298"


class _GridRotary(GridMixin, RotaryEncoding):
    """What the rotary grid encodings share (:class:`~posenc.positions.GridMixin`); prefix
    tokens sit at (0, 0), where the rotation is the identity."""


def _check_grid_rope_keys(config: RoPE2DConfig | RoPEMixedConfig) -> None:
    """The checks of the keys both grid RoPE configs have (head_dim, base, layout, grid,
    prefix); normalises ``grid`` to a tuple."""
    check_int("head_dim", config.head_dim, minimum=4)
    if config.head_dim % 4:
        raise ValueError(
            f"head_dim must be a multiple of 4 (half the pairs per axis or initial direction), "
            f"got {config.head_dim}"
        )
    check_float("base", config.base)
    if config.base <= 1:
        raise ValueError(f"base must be > 1, got {config.base}")
    check_choice("layout", config.layout, ROPE_LAYOUTS)
    check_grid_config(config)


@dataclasses.dataclass(frozen=True)
class RoPE2DConfig(RotaryConfig):
    """Configuration of :class:`RoPE2D`.

    Attributes:
        head_dim: size of each attention head, a multiple of 4 (each axis rotates
            ``head_dim / 4`` pairs).
        base: the wavelength base θ; 100, the paper's choice for images.
        layout: ``"half"`` (pair i is dimensions i, i + d/2; posenc's default, DINOv3) or
            ``"interleaved"`` (pair i is 2i, 2i + 1; Heo et al.'s complex pairs).
        axis_order: which coordinate the first half of the pairs takes: ``"xy"`` the column
            (Heo et al.), ``"yx"`` the row (DINOv3).
        coord_scale: multiplies the coordinates: 1 for integer patch indices (Heo et al.);
            DINOv3 uses 2π with ``grid(h, w, normalize=True)`` coordinates.
        grid: the default grid ``(h, w)`` of patches, or None (positions must be passed).
        prefix: prefix tokens (class, registers) before the patches in the default grid.
    """

    head_dim: int
    base: float = 100.0
    layout: str = "half"
    axis_order: str = "xy"
    coord_scale: float = 1.0
    grid: tuple[int, int] | None = None
    prefix: int = 0

    def __post_init__(self) -> None:
        _check_grid_rope_keys(self)
        check_choice("axis_order", self.axis_order, AXIS_ORDERS)
        check_float("coord_scale", self.coord_scale)


@register(
    "rope_2d",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference=REFERENCE,
    summary="axial RoPE for image grids: half the pairs rotate with the column, half with the row",
    formula=(
        'pair i < d/4 turns by x·θ_i, pair d/4 + i by y·θ_i (axis_order "yx" swaps the halves),\n'
        "θ_i = base^(−4i/d) (base 100),  (y, x) = coord_scale·(row, column),  d = head_dim\n"
        "q'·k' depends on the offset (Δy, Δx) only"
    ),
)
class RoPE2D(_GridRotary):
    """Axial 2-D rotary position embedding.

    Pair i < head_dim/4 rotates by x·θ_i and pair head_dim/4 + i by y·θ_i (``axis_order="xy"``;
    ``"yx"`` swaps the halves), θ_i = base^(-4i/head_dim), so that
    ⟨R(y, x) q, R(y', x') k⟩ depends on (y - y', x - x') only. No tables are stored: they
    are computed in float64 from the positions, rounded once to float32.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column) -> rotated q, k.

    Example:
        >>> import torch, posenc
        >>> from posenc.positions import grid
        >>> rope = posenc.create("rope_2d", head_dim=16, grid=(2, 3), prefix=1)
        >>> q = k = torch.randn(1, 4, 7, 16)
        >>> q2, k2 = rope(q, k)  # the positions of grid(2, 3, prefix=1)
        >>> torch.equal(q2, rope(q, k, positions=grid(2, 3, prefix=1))[0])
        True
        >>> torch.equal(q2[:, :, 0], q[:, :, 0])  # the class token sits at (0, 0)
        True
    """

    Config = RoPE2DConfig
    config: RoPE2DConfig

    def inv_freq(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The per-axis frequencies times ``coord_scale``, float64 ``[head_dim // 4]``."""
        c = self.config
        return axial_rope_inv_freq(c.head_dim, c.base, c.coord_scale, device=device)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, float32 (float64 for float64 positions): ``[(batch,) seq, d/2]``.
        ``seq_len`` changes nothing (no scaling depends on it) but is checked."""
        check_seq_len(seq_len)
        positions = self.check_positions(positions)
        inv_freq = self.inv_freq(positions.device)
        return axial_rope_cos_sin(positions, inv_freq, self.config.axis_order)

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` turned by :meth:`rotation`'s ``(cos, sin)`` of its positions. Shapes: x
        ``[batch, heads, seq, head_dim]``, cos and sin ``[(batch,) seq, head_dim // 2]``
        -> as x."""
        cos, sin = check_rotate(
            self, x, rotation, key, width=self.head_dim // 2, heads=(None, None)
        )
        return rotate_checked(x, cos, sin, self.config.layout)


@dataclasses.dataclass(frozen=True)
class RoPEMixedConfig(RotaryConfig):
    """Configuration of :class:`RoPEMixed`.

    Attributes:
        head_dim: size of each attention head, a multiple of 4.
        n_heads: query heads; each has its own learned frequencies.
        n_kv_heads: key/value heads for grouped-query attention (default ``n_heads``). The
            query heads of a group share one set of frequencies, the one of their key head,
            so that their scores stay relative: there are ``n_kv_heads`` sets.
        base: the wavelength base of the initial magnitudes; 10, as in the paper.
        layout: ``"half"`` (pair i is dimensions i, i + d/2; posenc's default) or
            ``"interleaved"`` (pair i is 2i, 2i + 1; Heo et al.'s complex pairs).
        grid: the default grid ``(h, w)`` of patches, or None (positions must be passed).
        prefix: prefix tokens (class, registers) before the patches in the default grid.
    """

    head_dim: int
    n_heads: int
    n_kv_heads: int | None = None
    base: float = 10.0
    layout: str = "half"
    grid: tuple[int, int] | None = None
    prefix: int = 0

    def __post_init__(self) -> None:
        _check_grid_rope_keys(self)
        check_int("n_heads", self.n_heads)
        n_kv_heads = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        object.__setattr__(self, "n_kv_heads", n_kv_heads)
        check_int("n_kv_heads", n_kv_heads)
        if self.n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})"
            )


@register(
    "rope_mixed",
    trainable=True,
    relative=True,
    extrapolates=True,
    reference=REFERENCE,
    summary="RoPE for image grids with learned per-head frequencies along any direction",
    formula=(
        "pair i of head h turns by x·f_x[h, i] + y·f_y[h, i]:  (y, x) the patch's (row, column),\n"
        "f_x, f_y learned per key head;  initially f_x[h] = [m·cos φ_h | m·cos(φ_h + π/2)],\n"
        "f_y[h] = [m·sin φ_h | m·sin(φ_h + π/2)],  m_i = base^(−4i/d), i < d/4,  φ_h ~ U(0, 2π)"
    ),
)
class RoPEMixed(_GridRotary):
    """RoPE-Mixed: pair i of head h rotates by x·f_x[h, i] + y·f_y[h, i], learned.

    ``freqs`` ``[2, n_kv_heads, head_dim // 2]`` (float32; ``freqs[0]`` is f_x, ``freqs[1]``
    f_y) is initialised as in the paper's code (:func:`~posenc.functional.rope_mixed_freqs`
    with a phase φ ~ U(0, 2π) per set, drawn from the global torch RNG). Scores depend on the
    offset (dy, dx) only, for any frequencies. One instance holds one set of frequencies;
    the paper learns a set per layer, which is one encoding per layer here.

    Grouped-query attention: queries must have ``n_heads`` heads and keys ``n_kv_heads``
    (or ``n_heads``, e.g. repeated ones); query head h rotates with the set of its key head,
    ``h // (n_heads // n_kv_heads)``. Keys whose head count is neither raise.

    Shapes:
        q ``[batch, n_heads, seq, head_dim]``, k ``[batch, n_kv_heads, seq, head_dim]``,
        positions ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column) -> rotated q, k;
        ``rotation()``: cos, sin ``[batch or 1, n_kv_heads, seq, head_dim // 2]``.

    Example:
        >>> import torch, posenc
        >>> from posenc.positions import grid
        >>> rope = posenc.create("rope_mixed", head_dim=16, n_heads=4)
        >>> rope.freqs.shape
        torch.Size([2, 4, 8])
        >>> q = k = torch.randn(1, 4, 6, 16)
        >>> q2, k2 = rope(q, k, positions=grid(2, 3))
        >>> q2.shape
        torch.Size([1, 4, 6, 16])
    """

    Config = RoPEMixedConfig
    config: RoPEMixedConfig

    def __init__(self, config: RoPEMixedConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        shape = (2, self.n_kv_heads, self.head_dim // 2)  # [f_x/f_y, sets, pairs]
        self.freqs = nn.Parameter(torch.empty(shape, **self.factory_kwargs))
        self.reset_parameters()

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads, one set of frequencies each (``n_heads`` unless configured)."""
        n_kv_heads = self.config.n_kv_heads
        assert n_kv_heads is not None  # RoPEMixedConfig.__post_init__ resolves it
        return n_kv_heads

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw a random phase per set of frequencies and re-initialise ``freqs``."""
        c = self.config
        device = self.freqs.device
        phases = torch.empty(self.n_kv_heads, dtype=torch.float64, device=device)
        phases.uniform_(0, 2 * math.pi)
        self.freqs.copy_(rope_mixed_freqs(phases, c.head_dim, c.base))

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` per set of frequencies: ``[batch or 1, n_kv_heads, seq, d/2]``,
        float32 (float64 for float64 positions or parameters). ``seq_len`` changes nothing
        but is checked."""
        check_seq_len(seq_len)
        positions = self.check_positions(positions)
        return rope_mixed_cos_sin(positions, self.freqs)

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` turned by :meth:`rotation`'s tables, each head by the set of frequencies
        of its key head. Shapes: x ``[batch, heads, seq, head_dim]``, cos and sin
        ``[batch or 1, n_kv_heads, seq, head_dim // 2]`` -> as x."""
        c, n_kv_heads = self.config, self.n_kv_heads
        sets = (n_kv_heads, n_kv_heads)
        cos, sin = check_rotate(self, x, rotation, key, width=self.head_dim // 2, heads=sets)
        heads = x.shape[1]
        if key and heads not in (c.n_heads, n_kv_heads):
            raise ValueError(
                f"k has {heads} heads but rope_mixed has n_kv_heads={n_kv_heads} "
                f"(n_heads={c.n_heads}): key heads rotate with the frequencies of their query "
                "heads; for grouped-query attention set n_kv_heads to the number of key heads"
            )
        if not key and heads != c.n_heads:
            raise ValueError(
                f"q has {heads} heads but rope_mixed has n_heads={c.n_heads}: each query head "
                "rotates with its own learned frequencies"
            )
        if heads != n_kv_heads:  # query heads: the set of each one's key head
            group = c.n_heads // n_kv_heads
            cos, sin = cos.repeat_interleave(group, 1), sin.repeat_interleave(group, 1)
        return rotate_checked(x, cos, sin, c.layout)
