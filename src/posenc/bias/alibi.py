"""ALiBi: a fixed linear distance penalty per head, added to the attention scores (Press et
al. 2022, "Train Short, Test Long", arXiv:2108.12409)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from ..base import BiasConfig, BiasEncoding, LinearSlopes, ShiftInvariant
from ..base.encoding import check_float_dtype
from ..config import check_bool, check_device, check_float, check_int
from ..functional.alibi import alibi_bias, alibi_slope
from ..functional.dtypes import math_dtype, wide_dtype
from ..registry import register

__all__ = ["ALiBi"]


@dataclasses.dataclass(frozen=True)
class AlibiConfig(BiasConfig):
    """Configuration of :class:`ALiBi`.

    Attributes:
        n_heads: attention heads.
        symmetric: bias ``-m |i - j|`` (bidirectional encoders) instead of the causal
            ``-m (i - j)``.
        alibi_heads: how many heads, the first ones, carry a bias; they get the slopes of a
            model of ``alibi_heads`` heads and the other heads get none. Default: all.
        slopes: custom positive slopes, one per biased head (``alibi_heads`` of them, or
            ``n_heads``), instead of the paper's geometric sequence; stored as a tuple.
    """

    n_heads: int
    symmetric: bool = False
    alibi_heads: int | None = None
    slopes: Any = None

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_bool("symmetric", self.symmetric)
        if self.alibi_heads is not None:
            check_int("alibi_heads", self.alibi_heads)
            if self.alibi_heads > self.n_heads:
                raise ValueError(
                    f"alibi_heads ({self.alibi_heads}) exceeds n_heads ({self.n_heads})"
                )
        if self.slopes is not None:
            if not isinstance(self.slopes, (list, tuple)):
                raise TypeError(
                    f"slopes must be a list of numbers, got {type(self.slopes).__name__}"
                )
            if len(self.slopes) != self.biased_heads:
                raise ValueError(
                    f"slopes has {len(self.slopes)} values but {self.biased_heads} heads "
                    "carry a bias (alibi_heads, else n_heads)"
                )
            for i, m in enumerate(self.slopes):
                check_float(f"slopes[{i}]", m)
            object.__setattr__(self, "slopes", tuple(float(m) for m in self.slopes))

    @property
    def biased_heads(self) -> int:
        return self.n_heads if self.alibi_heads is None else self.alibi_heads


@register(
    "alibi",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="Press et al. 2022, Train Short, Test Long (ALiBi), arXiv:2108.12409",
    summary="a fixed per-head linear penalty on query-key distance, added to the scores",
    formula=(
        "s_ij = q_i·k_j/√d − m_h·(i − j)  (symmetric: −m_h·|i − j|),  head h = 1..H\n"
        "m_h = 2^(−8h/c) for h ≤ c, then 2^(−4(2(h − c) − 1)/c) for h > c,  c the largest\n"
        "power of 2 ≤ H (H a power of 2: m_h = 2^(−8h/H));  alibi_heads < H: the rest get m = 0"
    ),
)
class ALiBi(ShiftInvariant, LinearSlopes, BiasEncoding):
    """ALiBi: head ``h`` adds ``-m_h (i - j)`` (or ``-m_h |i - j|``) to the scaled scores.

    The slopes are derived from the config on every call, in float64 and rounded once: no
    parameters, no buffers, so ``model.to(torch.bfloat16)`` cannot round them. The paper
    puts the same bias in every layer, as :class:`~posenc.models.TransformerLM` does when it
    shares one encoding.

    The bias is linear in the distance, so :meth:`linear_slopes` lets attention run it on
    the CPU inside SDPA's fused kernel (:mod:`posenc.attn.runners.linear`: no ``[heads, L,
    L]`` tensor, close to the time of plain causal SDPA; ``docs/design-notes.md``, "Fused
    ALiBi on CPU SDPA"), within ~4e-6 of exact in float32 at any length, float16/bfloat16
    computed in float32 and rounded once. Other devices, symmetric
    non-causal attention and ``torch.compile`` take the generic paths (flex or SDPA).

    Shapes:
        ``bias(q_positions, k_positions)``: ``[n_heads, q_len, k_len]`` (float32).

    Example:
        >>> import torch, posenc
        >>> alibi = posenc.create("alibi", n_heads=8)
        >>> alibi.slopes()[[0, 7]].tolist()
        [0.5, 0.00390625]
        >>> alibi.bias(torch.tensor([3]), torch.arange(4))[0]
        tensor([[-1.5000, -1.0000, -0.5000, -0.0000]])
    """

    Config = AlibiConfig
    config: AlibiConfig

    def __init__(self, config: AlibiConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        # read once here, on the CPU whatever the default device: a forward's plan never
        # reads a tensor for them (None under a fake-tensor mode: read at the first use)
        self._float64_slopes: list[float] | None = None
        with contextlib.suppress(RuntimeError):
            self._float64_slopes = self.slopes("cpu", torch.float64).tolist()

    def head_slopes(self, head: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The slope of each head index in ``head`` (elementwise, rounded once to ``dtype``):
        read from every head's slope, computed once per device and dtype while the config
        is the same (:meth:`~posenc.base.BiasEncoding.derived`); computed per index while
        ``torch.compile`` traces (flex attention's score_mod builds no tensor)."""
        if torch.compiler.is_compiling() or head.dtype not in (torch.int64, torch.int32):
            return self._head_slopes(head, dtype)  # not an index (or a trace): the formula
        device = head.device

        def every() -> torch.Tensor:
            return self._head_slopes(torch.arange(self.config.n_heads, device=device), dtype)

        return self.derived(("slopes", device, dtype), every)[head]

    def _head_slopes(self, head: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """:meth:`head_slopes` by its formula, elementwise."""
        c = self.config
        h = head.to(wide_dtype(head.device))
        if c.slopes is None:
            slope = alibi_slope(h, c.biased_heads)
        else:  # a select chain, not a table: flex attention cannot build tensors in a score_mod
            slope = torch.zeros_like(h)
            for i, m in enumerate(c.slopes):
                slope = torch.where(h == i, m, slope)
        if c.biased_heads < c.n_heads:
            slope = torch.where(h < c.biased_heads, slope, 0.0)
        return slope.to(dtype)

    def slopes(
        self, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """Every head's slope, 0 for heads without a bias, in ``dtype`` (floating point).
        Shapes: ``[n_heads]``."""
        device = check_device(device)
        if dtype is None:  # check_float_dtype lets None through (a factory's default)
            raise TypeError("dtype must be a floating-point torch.dtype, got None")
        check_float_dtype(dtype)
        return self.head_slopes(torch.arange(self.n_heads, device=device), dtype)

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        slope = self.head_slopes(head, math_dtype(q_pos.dtype, k_pos.dtype))
        return alibi_bias(slope, q_pos, k_pos, self.config.symmetric)

    def linear_slopes(self, causal: bool) -> list[float] | None:
        """Every head's slope (float64 values; 0 for heads without a bias): the bias is
        ``-m_h (i - j)``, and the symmetric ``-m_h |i - j|`` equals it under the causal
        mask. None for symmetric non-causal attention (not linear in ``i - j``)."""
        check_bool("causal", causal)
        if self.config.symmetric and not causal:
            return None
        if self._float64_slopes is None:
            self._float64_slopes = self.slopes("cpu", torch.float64).tolist()
        return list(self._float64_slopes)
