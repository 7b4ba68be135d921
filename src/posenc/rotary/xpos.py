"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554).

RoPE plus a per-pair exponential decay. Pair i of the rotary dimension d has

    ζ_i = (2i + 0.4·d) / (1.4·d)        (the paper's (2i/d + γ)/(1 + γ), γ = 0.4)

and after the RoPE rotation a query at position n is multiplied by ζ_i^(n/scale_base), a key
at position m by ζ_i^(-m/scale_base) (scale_base 512). Pair i of ``q·k`` thus gains the factor
ζ_i^((n - m)/scale_base): the scores stay relative, and since every ζ_i < 1 they decay with
the distance n - m of a causal query to its keys (they grow for keys after the query, so
xPos is meant for causal attention).

The centre. ζ^(±n/512) leaves float32's range at n ≈ 36k, so positions are taken relative to
a centre c: queries are multiplied by ζ^((n - c)/scale_base), keys by ζ^(-(m - c)/scale_base).
The product is still ζ^((n - m)/scale_base) for every c, so c changes no attention score and
a checkpoint works with any centre; it only moves the window of positions whose factors
can be represented. The centre is the fixed configuration value ``center`` (default 0: the
paper's formula as written, and factors near 1 at the start of every sequence, where most
tokens are). It never depends on the current length: the reference code centres on the
length of each forward, which gives the keys kept in a KV cache a centre different from
the query's, hence wrong scores (a per-pair factor ζ^((c_key - c_query)/scale_base)).

The window. A position is accepted when its factor and that factor's inverse are normal
numbers at least 2^8 below the largest finite value of the dtype (so q/k entries up to 256
in magnitude cannot overflow), i.e. when |n - c| <= :func:`xpos_max_distance`: about 33.7k
positions for float32 and bfloat16 at scale_base 512, 2k for float16. A position outside
raises ``ValueError`` instead of producing inf or 0; for longer sequences set ``center`` near
the middle of the positions in use (e.g. half the maximum length).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..config import check_float
from ..functional.rope import apply_rope
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

DEFAULT_SCALE_BASE = 512.0
#: γ of the paper: ζ_i = (2i/d + γ) / (1 + γ)
GAMMA = 0.4
#: bits kept free below a dtype's largest finite value, for the magnitude of q and k
HEADROOM_BITS = 8
#: log2(1/ζ_0) = log2((1 + γ)/γ): the fastest-decaying pair, which bounds the window
_LOG2_INV_ZETA_0 = math.log2((1 + GAMMA) / GAMMA)


def _math_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def xpos_zeta(rotary_dim: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The per-pair decay bases ζ_i = (2i + 0.4·d)/(1.4·d), in float64 (float32 on MPS).

    Sun et al. 2022, arXiv:2212.10554 (γ = 0.4). ζ_0 = 2/7 and ζ_i -> 1 as i -> d/2.

    Shapes:
        returns ``[rotary_dim // 2]``
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    i = torch.arange(rotary_dim // 2, device=device, dtype=_math_dtype(device))
    return (2 * i + GAMMA * rotary_dim) / ((1 + GAMMA) * rotary_dim)


def xpos_scale(
    positions: torch.Tensor,
    zeta: torch.Tensor,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: float = 0.0,
) -> torch.Tensor:
    """The query factors ζ_i^((n - center)/scale_base) of each position (keys use 1/them).

    Computed in float64 (float32 on MPS) and rounded once to float32, or kept in float64 for
    float64 positions, as RoPE's cos/sin are. Range checks are in
    :func:`check_xpos_positions`; this function does not clamp.

    Shapes:
        positions ``[...]`` (``[seq]`` or ``[batch, seq]``), zeta ``[n]`` -> ``[..., n]``
    """
    dtype = _math_dtype(positions.device)
    out = torch.float64 if positions.dtype == torch.float64 else torch.float32
    exponents = (positions.to(dtype) - center) / scale_base  # [...]
    return (zeta.to(positions.device, dtype) ** exponents.unsqueeze(-1)).to(out)  # [..., n]


def xpos_max_distance(
    scale_base: float = DEFAULT_SCALE_BASE, dtype: torch.dtype = torch.float32
) -> float:
    """The largest |position - center| whose xPos factors ``dtype`` holds.

    Every factor ζ_i^(±(n - c)/scale_base) and its inverse must be a normal number at least
    ``2**HEADROOM_BITS`` below ``dtype``'s largest finite value. ζ_0 = 2/7 decays fastest, so
    the bound is ``min(floor(log2(max)) - 8, -log2(tiny)) · scale_base / log2(7/2)``: 33,711
    for float32 and bfloat16 (2^±119), 1,983 for float16 (2^±7) at scale_base 512; it does not
    depend on head_dim.
    """
    return _max_log2_factor(dtype) * scale_base / _LOG2_INV_ZETA_0


def _max_log2_factor(dtype: torch.dtype) -> float:
    # in whole powers of two, so that float32 and bfloat16 (same exponent range) agree
    info = torch.finfo(dtype)
    return min(math.floor(math.log2(info.max)) - HEADROOM_BITS, -math.log2(info.tiny))


def _skip_value_checks(t: torch.Tensor) -> bool:
    # data-dependent checks would break a torch.compile graph; meta tensors have no values
    return torch.compiler.is_compiling() or t.device.type == "meta" or t.numel() == 0


def check_xpos_positions(
    positions: torch.Tensor,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: float = 0.0,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Raise ``ValueError`` if a position lies farther from ``center`` than
    :func:`xpos_max_distance` allows for ``dtype`` (skipped under ``torch.compile``).

    Shapes:
        positions ``[seq]`` or ``[batch, seq]``
    """
    if _skip_value_checks(positions):
        return
    low, high = (float(v) for v in torch.aminmax(positions))
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


def apply_xpos(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    scale: torch.Tensor,
    layout: str = "half",
    key: bool = False,
) -> torch.Tensor:
    """Rotate the pairs of ``x`` (RoPE) and multiply them by ``scale`` (queries) or
    ``1/scale`` (keys).

    Both elements of a pair get the same factor, and a rotation commutes with a scalar, so
    the factor is folded into cos and sin: the result is
    :func:`~posenc.functional.apply_rope` with ``(cos·f, sin·f)``, computed in float32
    (float64 for float64 input) and rounded once to ``x.dtype``. Dimensions past the rotary
    ones pass through unchanged. When ``x.dtype`` holds a narrower range than the table
    (float16), a factor it cannot hold raises ``ValueError`` (skipped under compile).

    Sun et al. 2022, arXiv:2212.10554.

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin, scale ``[seq, n]`` or
        ``[batch, seq, n]`` with ``2n <= head_dim`` -> ``[batch, heads, seq, head_dim]``
    """
    allowed = _max_log2_factor(x.dtype)
    if allowed < _max_log2_factor(scale.dtype) and not _skip_value_checks(scale):
        worst = float(scale.log2().abs().amax())
        if worst > allowed:
            raise ValueError(
                f"xPos factors reach 2^±{worst:.1f} but {x.dtype} inputs hold 2^±{allowed:.1f} "
                f"(positions within xpos_max_distance(scale_base, {x.dtype}) of the centre): "
                "use bfloat16 or float32, or a center nearer the positions in use"
            )
    factor = 1 / scale if key else scale
    return apply_rope(x, cos * factor, sin * factor, layout)


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
)
class XPos(RoPE):
    """xPos: RoPE with a per-pair decay of the scores with distance.

    ``rotation()`` returns ``(cos, sin, scale)``; ``apply()`` rotates and multiplies queries
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

    def zeta(self, device: torch.device | str | None = None) -> torch.Tensor:
        """ζ_i of each rotating pair (float64). Shapes: ``[rotary_dim // 2]``."""
        return xpos_zeta(self.config.rotary_dim, device)

    def max_distance(self, dtype: torch.dtype = torch.float32) -> float:
        """The largest |position - center| accepted for ``dtype``."""
        return xpos_max_distance(self.config.scale_base, dtype)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(cos, sin, scale)``, each ``positions.shape + (n,)``, float32 (float64 for
        float64 positions); ``scale`` holds the query factors ζ_i^((n - center)/scale_base)."""
        positions = self.check_positions(positions)  # integer dtypes as int64
        cos, sin = super().rotation(positions, seq_len)
        c = self.config
        check_xpos_positions(positions, c.scale_base, c.center, cos.dtype)
        # ζ over the pairs cos/sin cover (all head_dim pairs for "proportional" scaling)
        zeta = xpos_zeta(2 * cos.shape[-1], positions.device)
        return cos, sin, xpos_scale(positions, zeta, c.scale_base, c.center)

    def apply(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        cos, sin, scale = rotation
        return apply_xpos(x, cos, sin, scale, self.config.layout, key=key)
