"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554).

RoPE plus a per-pair decay of the scores with distance: queries are multiplied by
ζ_i^((n - c)/scale_base), keys by ζ_i^(-(m - c)/scale_base), around a fixed centre c (the
config's ``center``, default 0), so that a KV cache keeps every key's factor. The math is in
:mod:`posenc.functional.xpos` (pure: it reads no value); the range checks that read values
on the host are here, through :mod:`posenc.host_reads` (one read each, none with
``posenc.validation(False)``): the window of positions (:func:`check_xpos_positions`) and
the factors a float16 input holds (:meth:`XPos.rotate`). The derivation of the centre and
of the window of representable positions is in ``docs/design-notes.md``.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import torch

from ..arguments import check_tensor
from ..base import RotaryEncoding
from ..config import check_float
from ..functional.rope_kernel import rotate_checked
from ..functional.xpos import (
    DEFAULT_SCALE_BASE,
    apply_xpos,
    xpos_factor_bound,
    xpos_max_distance,
    xpos_scale,
    xpos_zeta,
)
from ..host_reads import read, reads_values
from ..registry import register
from .rope import RoPE, RopeConfig

__all__ = [
    "XPos",
    "XPosConfig",
    "apply_xpos",
    "check_xpos_positions",
    "xpos_max_distance",
    "xpos_scale",
    "xpos_zeta",
]


def check_xpos_positions(
    positions: torch.Tensor,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: float = 0.0,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Raise ``ValueError`` if a position lies farther from ``center`` than
    :func:`~posenc.functional.xpos.xpos_max_distance` allows for ``dtype``: one host read
    (:mod:`posenc.host_reads`; skipped with validation off, under ``torch.compile`` and
    on the meta device).

    Shapes:
        positions ``[seq]`` or ``[batch, seq]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    check_float("scale_base", scale_base)
    check_float("center", center, positive=False)
    xpos_max_distance(scale_base, dtype)  # checks dtype
    if reads_values(positions):
        read(
            torch.stack(torch.aminmax(positions)),
            partial(_check_distance, scale_base, center, dtype),
        )


def _check_distance(scale_base: float, center: float, dtype: torch.dtype, values: list) -> None:
    low, high = (float(v) for v in values)
    worst = high if abs(high - center) >= abs(low - center) else low
    limit = xpos_max_distance(scale_base, dtype)
    if abs(worst - center) > limit:
        raise ValueError(
            f"xPos position {worst:g} is {abs(worst - center):g} from center={center:g}, "
            f"past the {limit:.0f} positions either side that {dtype} holds at "
            f"scale_base={scale_base:g} (the factor ζ^((n - center)/scale_base) would "
            f"overflow or underflow): keep positions within [{center - limit:.0f}, "
            f"{center + limit:.0f}] or set center near the middle of the positions in use"
        )


def _check_factors(scale: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` (one host read) if an xPos factor of ``scale`` is past what
    inputs of ``dtype`` hold, when ``dtype`` holds less than ``scale``'s (float16)."""
    allowed = xpos_factor_bound(dtype)
    if allowed < xpos_factor_bound(scale.dtype) and reads_values(scale):
        read(scale.log2().abs().amax().view(1), partial(_check_factor, allowed, dtype))


def _check_factor(allowed: float, dtype: torch.dtype, values: list[float]) -> None:
    worst = values[0]
    if worst > allowed:
        raise ValueError(
            f"xPos factors reach 2^±{worst:.1f} but {dtype} inputs hold 2^±{allowed:.1f} "
            f"(positions within xpos_max_distance(scale_base, {dtype}) of the centre): "
            "use bfloat16 or float32, or a center nearer the positions in use"
        )


@dataclasses.dataclass(frozen=True)
class XPosConfig(RopeConfig):
    """Configuration of :class:`XPos`: every :class:`~posenc.rotary.rope.RopeConfig` key, and

    Attributes:
        scale_base: the decay length; pair i of q·k is multiplied by
            ζ_i^((n - m)/scale_base). 512 in the paper.
        center: the fixed position c the factors are taken relative to (queries
            ζ^((n - c)/scale_base), keys ζ^(-(m - c)/scale_base)). It changes no attention
            score, only which positions are representable: |n - c| <=
            :func:`xpos_max_distance` (about 33.7k for float32 at scale_base 512). Default 0.

    The pair layout defaults to ``"half"`` as for every rotary encoding in posenc; the paper's
    code (torchscale) rotates ``"interleaved"`` pairs, so pass that to run its checkpoints.
    """

    scale_base: float = DEFAULT_SCALE_BASE
    center: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rotary_at != "start":
            raise ValueError(
                f"xpos rotates and scales a head's first rotary_dim channels: rotary_at must "
                f"be 'start', got {self.rotary_at!r}"
            )
        check_float("scale_base", self.scale_base)
        check_float("center", self.center, positive=False)
        if self.center < 0:
            raise ValueError(
                f"center must be >= 0 (positions are >= 0, so a negative centre only wastes "
                f"range), got {self.center}"
            )


@register(
    "xpos",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="Sun et al. 2022, A Length-Extrapolatable Transformer, arXiv:2212.10554",
    summary="RoPE whose pairs decay as ζ_i^((n - m)/512): attention fades with distance",
    formula=(
        "RoPE, then pair i of a query at n is multiplied by ζ_i^((n − c)/scale_base)\n"
        "and pair i of a key at m by ζ_i^(−(m − c)/scale_base),  ζ_i = (2i + 0.4·r)/(1.4·r)\n"
        "so pair i of q'·k' gains ζ_i^((n − m)/scale_base) < 1: it fades with distance\n"
        "(r = rotary_dim, c = center, scale_base = 512 in the paper)"
    ),
)
class XPos(RoPE):
    """xPos: RoPE with a per-pair decay of the scores with distance.

    ``rotation()`` returns ``(cos, sin, scale)``; ``rotate()`` rotates and multiplies queries
    by ``scale`` and keys (``key=True``) by ``1/scale``. Nothing is stored: the tables come
    from the config and the positions in every forward. Every RoPE option (layout, scaling,
    partial rotary) applies; ζ runs over the pairs that rotate.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]`` -> q, k of the same shapes.

    Example:
        >>> import torch, posenc
        >>> from posenc.rotary.xpos import XPos
        >>> xpos = XPos(head_dim=64)
        >>> q = k = torch.randn(1, 8, 10, 64)
        >>> q2, k2 = xpos(q, k)
        >>> q2.shape
        torch.Size([1, 8, 10, 64])
    """

    Config = XPosConfig
    config: XPosConfig
    rotation_tables = 3  # cos, sin, scale

    def zeta(self, device: torch.device | str | None = None) -> torch.Tensor:
        """ζ_i of each rotating pair (float64). Shapes: ``[rotary_dim // 2]``."""
        rotary_dim = self.config.rotary_dim
        assert rotary_dim is not None  # RopeConfig.__post_init__ resolves it
        return xpos_zeta(rotary_dim, device)

    def max_distance(self, dtype: torch.dtype = torch.float32) -> float:
        """The largest |position - center| accepted for ``dtype``."""
        return xpos_max_distance(self.config.scale_base, dtype)

    def check_positions(
        self,
        positions: torch.Tensor,
        *,
        seq_len: int | None = None,
        batch: int | None = None,
        name: str = "positions",
        device: torch.device | None = None,
    ) -> torch.Tensor:
        """:meth:`~posenc.base.Encoding.check_positions`, and every position within
        :meth:`max_distance` of the centre for the tables' dtype (float64 for float64
        positions, else float32): a model checks its positions here, in its one read."""
        positions = super().check_positions(
            positions, seq_len=seq_len, batch=batch, name=name, device=device
        )
        dtype = torch.float64 if positions.dtype == torch.float64 else torch.float32
        check_xpos_positions(positions, self.config.scale_base, self.config.center, dtype)
        return positions

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(cos, sin, scale)``, each ``positions.shape + (n,)``, float32 (float64 for
        float64 positions); ``scale`` holds the query factors ζ_i^((n - center)/scale_base)."""
        positions = self.check_positions(positions)  # integer dtypes as int64, in range
        cos, sin = super().rotation(positions, seq_len)
        c = self.config
        # ζ over the pairs cos/sin cover (all head_dim pairs for "proportional" scaling)
        zeta = xpos_zeta(2 * cos.shape[-1], positions.device)
        return cos, sin, xpos_scale(positions, zeta, c.scale_base, c.center)

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """:func:`~posenc.functional.xpos.apply_xpos` of ``x`` by ``rotation``, after one
        host read when ``x``'s dtype holds less range than the tables (float16): a factor
        it cannot hold raises ``ValueError`` (:mod:`posenc.host_reads`)."""
        cos, sin, scale = self._check_rotate(x, rotation, key)
        _check_factors(scale, x.dtype)
        kernel = partial(rotate_checked, kernel=self.config.kernel)
        return apply_xpos(x, cos, sin, scale, self.config.layout, key=key, kernel=kernel)

    #: queries and keys scale apart: one tensor at a time, each through :meth:`rotate`
    rotate_pair = RotaryEncoding.rotate_pair

    def rotate_back(self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Not defined: xPos scales queries and keys apart, so no one conjugate undoes it."""
        raise TypeError("xpos has no conjugate rotation: it scales queries and keys apart")
