"""The T5 relative position bias (Raffel et al. 2020, arXiv:1910.10683, §2.1): a learned
scalar per head and log-spaced distance bucket, added to the attention scores."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, ShiftInvariant
from ..config import check_bool, check_float, check_int
from ..functional.dtypes import math_dtype
from ..functional.t5 import check_t5_buckets as check_buckets
from ..functional.t5 import t5_relative_bucket
from ..registry import register

__all__ = ["T5Bias"]


@dataclasses.dataclass(frozen=True)
class T5Config(BiasConfig):
    """Configuration of :class:`T5Bias`.

    Attributes:
        n_heads: attention heads (one learned scalar per head and bucket).
        num_buckets: distance buckets (32 in T5); even when ``bidirectional``.
        max_distance: the distance from which all positions share the last bucket (128).
        bidirectional: separate buckets for keys after the query, as in T5's encoder.
            Default False, T5's decoder setting: posenc's models are causal LMs, where keys
            after the query are masked and their half of the buckets would never train. Set
            True for a bidirectional encoder (``TransformerLM(causal=False)``); with False,
            a key after the query gets the bias of distance 0.
        init_std: standard deviation of the normal initialisation; 0 (the default) starts
            from a zero bias. Hugging Face's T5 draws ``N(0, d_model ** -0.5)``.
    """

    n_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = False
    init_std: float = 0.0

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("num_buckets", self.num_buckets)
        check_int("max_distance", self.max_distance)
        check_bool("bidirectional", self.bidirectional)
        check_buckets(self.num_buckets, self.max_distance, self.bidirectional)
        check_float("init_std", self.init_std, positive=False)
        if self.init_std < 0:
            raise ValueError(f"init_std must be >= 0, got {self.init_std}")


@register(
    "t5",
    trainable=True,
    relative=True,
    extrapolates=True,
    reference="Raffel et al. 2020, T5, arXiv:1910.10683",
    summary="a learned scalar per head and log-spaced distance bucket, added to the scores",
    formula=(
        "s_ij = q_i·k_j·scale + w[bucket(j − i), h]:  w a learned table of num_buckets × H\n"
        "bucket: n = max(i − j, 0) (bidirectional: |i − j|, keys after i in the upper N buckets),\n"
        "N = num_buckets (bidirectional: num_buckets/2), E = N/2:  n < E → n,  else\n"
        "min(N − 1, E + ⌊ln(n/E) / ln(max_distance/E)·(N − E)⌋)"
    ),
)
class T5Bias(ShiftInvariant, BiasEncoding):
    """T5's relative attention bias: ``bias[h, i, j] = weight[bucket(j - i), h]``.

    ``weight`` is ``[num_buckets, n_heads]``, the layout of Hugging Face's
    ``relative_attention_bias.weight``, so a T5 checkpoint's table copies in unchanged. It
    starts at zero (see ``init_std``): a fresh model is NoPE-like (order from the causal mask
    only) and the bias grows from there; the gradient of a bias does not depend on its value,
    so nothing stalls. Hugging Face instead draws ``N(0, d_model ** -0.5)``, a size this
    encoding does not know.

    The buckets of every distance ``-max_distance .. max_distance`` are computed once on the
    CPU by :func:`~posenc.functional.t5_relative_bucket` into the integer buffer
    ``buckets``, and :meth:`bias_at` looks them up (clipping the distance first, where the
    buckets saturate anyway). Every backend and device then uses the very same buckets as
    Hugging Face on the CPU: the float32 log truncated to an integer cannot flip a bucket
    at a boundary (e.g. distance 16, 32, 64) on another device's ``log``.

    T5 computes the bias in its first layer and shares it with every other layer; posenc's
    :class:`~posenc.models.TransformerLM` shares one encoding instance in the same way.
    T5 does not scale its scores by ``1/sqrt(head_dim)``: pass ``scale=1.0`` to
    :func:`posenc.attention` to reproduce it.

    Shapes:
        ``bias(q_positions, k_positions)``: ``[n_heads, q_len, k_len]`` (integer positions).

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("t5", n_heads=4)
        >>> enc.bias(torch.arange(3), torch.arange(3)).abs().max().item()
        0.0
    """

    Config = T5Config
    config: T5Config
    integer_positions = True  # buckets of integer distances
    buckets: torch.Tensor  # a non-persistent buffer, registered in __init__

    def __init__(self, config: T5Config | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        device = self.factory_kwargs["device"]
        self.weight = nn.Parameter(torch.empty(c.num_buckets, c.n_heads, **self.factory_kwargs))
        # the bucket of each distance -max_distance .. max_distance; derived, not saved
        buckets = torch.empty(2 * c.max_distance + 1, dtype=torch.long, device=device)
        self.register_buffer("buckets", buckets, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Zero (or ``N(0, init_std)``) weights; recompute the bucket table."""
        c = self.config
        if c.init_std == 0:
            nn.init.zeros_(self.weight)
        else:
            nn.init.normal_(self.weight, std=c.init_std)
        distances = torch.arange(-c.max_distance, c.max_distance + 1)  # on the CPU
        table = t5_relative_bucket(distances, c.bidirectional, c.num_buckets, c.max_distance)
        with torch.no_grad():
            self.buckets.copy_(table)

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``weight[bucket(k_pos - q_pos), head]``; integer positions only (a lookup)."""
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            raise TypeError(
                f"t5 buckets integer distances: positions must be integer tensors, "
                f"got {q_pos.dtype} and {k_pos.dtype}"
            )
        md = self.config.max_distance
        index = (k_pos - q_pos).clamp(-md, md) + md  # past max_distance: the same bucket
        dtype = math_dtype(self.weight.dtype)
        return self.weight[self.buckets[index], head].to(dtype)
