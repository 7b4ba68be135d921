"""PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda, Kim 2025, "PaTH Attention:
Position Encoding via Accumulating Householder Transformations", arXiv:2505.16381): the
score of a query and a key passes through a learned, data-dependent Householder-like
transform of every token between them; position as an accumulated, content-dependent
reflection rather than a fixed rotation."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, InputTransforms
from ..config import check_int
from ..functional.path import path_scores, path_transforms
from ..registry import register
from .inputs import check_bias_inputs, check_layer_input, check_scored_inputs

__all__ = ["Path"]


@dataclasses.dataclass(frozen=True)
class PathConfig(BiasConfig):
    """Configuration of :class:`Path`.

    Attributes:
        n_heads: query heads.
        dim: the width of the layer's input ``x`` the transforms read (the model's ``dim``).
        head_dim: the width of a head, which the transforms act on.
        kv_heads: key heads, one transform per token each (the paper's grouped-query
            choice: a group of query heads shares its keys and their transforms); None for
            ``n_heads`` (the config then holds ``n_heads``). It must divide ``n_heads``. A
            :class:`~posenc.models.TransformerLM` fills in its ``n_kv_heads``.
    """

    n_heads: int
    dim: int
    head_dim: int
    kv_heads: int | None = None

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("dim", self.dim)
        check_int("head_dim", self.head_dim)
        if self.kv_heads is None:  # the documented default, written down
            object.__setattr__(self, "kv_heads", self.n_heads)
        else:
            check_int("kv_heads", self.kv_heads)
            if self.n_heads % self.kv_heads:
                raise ValueError(f"kv_heads ({self.kv_heads}) must divide n_heads ({self.n_heads})")


@register(
    "path",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Yang, Shen, Wen, Tan, Mishra, Ren, Panda, Kim 2025 (PaTH Attention), "
    "arXiv:2505.16381",
    summary="the query-key product passes through a learned Householder-like transform of "
    "every token between them (data-dependent, accumulated reflections)",
    formula=(
        "s_ij = q_iᵀ H_i H_{i−1} ··· H_{j+1} k_j /√d_h   (keys j ≤ i; j = i: q_iᵀ k_i)\n"
        "H_t = I − β_t w_t w_tᵀ: w_t = W x_t/‖W x_t‖, β_t = 2σ(u·x_t + b) ∈ (0, 2)\n"
        "x_t the layer input of token t; one transform per token and key head"
    ),
)
class Path(InputTransforms, BiasEncoding):
    """PaTH attention's transforms, for one attention layer.

    Every token ``t`` has, per key head, a transform ``H_t = I − β_t w_t w_tᵀ`` of the
    layer's input ``x_t`` (the normalised residual stream, as the queries are), with ``w_t =
    normalize(W x_t)`` and ``β_t = 2 σ(u · x_t + b)``. The score of the query ``i`` and the
    key ``j <= i`` is ``q_iᵀ H_i H_{i−1} ··· H_{j+1} k_j · scale``: the transforms of the
    tokens after the key up to and with the query's (none for ``j = i``), the paper's
    ``k_jᵀ (Π_{s=j+1..i} H_s) q_i`` and flash-linear-attention's convention
    (:mod:`posenc.functional.path`). Causal only.

    Positions play no part: order comes from the transforms accumulated along the
    sequence, counted in tokens (the keys' index order; the queries are the last ``q_len``
    of the keys' tokens). An :class:`~posenc.base.InputTransforms`:

    - :meth:`transforms` gives each token's vector ``a_t = √β_t · w_t`` (``H_t = I − a_t
      a_tᵀ``), ``[batch, kv_heads, seq, head_dim]``, and :func:`posenc.attention` takes
      them as ``bias=`` (those of the keys' tokens). Padded keys' transforms are the
      identity (a pad is not there); with packed documents (``segment_ids``) a query sees
      only keys of its own document, and every token between them is of that document
      when documents lie in contiguous runs, as packing lays them.
    - :class:`~posenc.models.TransformerLM` gives each layer its own ``Path`` and keeps
      each cached key's transform beside it (the cache's keys are ``2 · head_dim`` wide:
      :attr:`width_factor`).
    - :meth:`bias` materialises the change to the plain scores, ``(s_ij − q_i·k_j) ·
      scale`` (the reference and the figures).

    The paper's layer also runs a short causal convolution over ``W x`` before the
    normalisation (flash-linear-attention's default, kernel 3) and a low-rank ``W``; here a
    token's transform reads its own input only, so that a cache needs nothing but each
    token's transform. PaTH-FoX (with FoX's forget gate) is not part of this encoding.

    Shapes:
        ``transforms(x)``: x ``[batch, seq, dim]`` -> ``[batch, kv_heads, seq,
        head_dim]``; ``bias(q_positions, k_positions, q=q, k=k, x=x)`` -> ``[batch,
        n_heads, q_len, k_len]``.

    Example:
        >>> import torch, posenc
        >>> path = posenc.create("path", n_heads=4, dim=32, head_dim=8)
        >>> x, q = torch.randn(2, 5, 32), torch.randn(2, 4, 5, 8)
        >>> path.transforms(x).shape
        torch.Size([2, 4, 5, 8])
        >>> posenc.attention(q, q, q, path, bias=path.transforms(x)).shape
        torch.Size([2, 4, 5, 8])
    """

    Config = PathConfig
    config: PathConfig
    #: the scores depend on the queries (and the keys and the layer's input)
    needs_q: ClassVar[bool] = True
    #: a KV cache keeps each key's transform beside it: its keys are twice as wide
    width_factor: ClassVar[int] = 2

    def __init__(self, config: PathConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c, heads = self.config, self.kv_heads
        self.weight = nn.Parameter(torch.empty(heads, c.head_dim, c.dim, **self.factory_kwargs))
        self.beta_weight = nn.Parameter(torch.empty(heads, c.dim, **self.factory_kwargs))
        self.beta_bias = nn.Parameter(torch.empty(heads, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation, ``U(-1/√dim, 1/√dim)``, for the projection and
        the gates of ``β``."""
        bound = 1.0 / math.sqrt(self.config.dim)
        for p in (self.weight, self.beta_weight, self.beta_bias):
            nn.init.uniform_(p, -bound, bound)

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    @property
    def kv_heads(self) -> int:
        """Key heads, one transform per token each."""
        kv = self.config.kv_heads
        return self.config.n_heads if kv is None else kv

    def _check_x(self, x: torch.Tensor | None) -> torch.Tensor:
        return check_layer_input(self, x, self.dim, "attention takes bias=path.transforms(x)")

    def transforms(self, x: torch.Tensor) -> torch.Tensor:
        """Each token's transform vector ``a_t = √β_t · w_t`` per key head (``H_t = I −
        a_t a_tᵀ``): the ``bias=`` that :func:`posenc.attention` takes with this encoding.
        float32 (float64 for float64 ``x``).

        Shapes:
            x ``[batch, seq, dim]`` -> ``[batch, kv_heads, seq, head_dim]``.
        """
        x = self._check_x(x)
        return path_transforms(x, self.weight, self.beta_weight, self.beta_bias)

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
        *,
        k: torch.Tensor | None = None,
        x: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(q_iᵀ H_i ··· H_{j+1} k_j − q_i·k_j) · scale``, what PaTH changes in the plain
        scores, over the tokens of ``x``: the keys are its ``k_len`` tokens and the queries
        its last ``q_len`` (a KV cache's layout); 0 for a key after its query. The
        positions are checked but not read (order is counted in tokens); ``scale``
        defaults to ``1/sqrt(head_dim)``.

        Shapes:
            positions ``[q_len]`` and ``[k_len]`` (or ``[batch, len]``), q ``[batch,
            n_heads, q_len, head_dim]``, k ``[batch, kv_heads, k_len, head_dim]``, x
            ``[batch, k_len, dim]`` -> ``[batch, n_heads, q_len, k_len]``, float32.
        """
        q, k = check_scored_inputs(self, q, k, self.head_dim, self.kv_heads)
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        x = self._check_x(x)
        q_len, k_len = q_positions.shape[-1], k_positions.shape[-1]
        if x.shape[:2] != (q.shape[0], k_len) or k.shape[:3:2] != (q.shape[0], k_len):
            raise ValueError(
                f"x and k must hold the batch's {k_len} keys' tokens (the queries are the "
                f"last {q_len}), got x {tuple(x.shape)} and k {tuple(k.shape)}"
            )
        if q_len > k_len:
            raise ValueError(
                f"path's queries are the last of its keys' tokens: q has {q_len} positions "
                f"but k only {k_len}"
            )
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        scores = path_scores(q, k, self.transforms(x))  # [b, h, q_len, k_len]
        keys = k.to(scores.dtype).repeat_interleave(self.n_heads // self.kv_heads, dim=1)
        plain = (q.to(scores.dtype) @ keys.transpose(-1, -2)).tril(k_len - q_len)
        return (scores - plain) * scale

    def bias_at(self, head, q_pos, k_pos):
        raise TypeError(
            "path's scores depend on the keys and the layer's input, not on positions: call "
            "bias(q_positions, k_positions, q=q, k=k, x=x), or attention with "
            "bias=path.transforms(x)"
        )

    def score_mod(self, *args, **kwargs):
        raise TypeError(
            "path's scores pass through the transforms between each key and its query, "
            "which no score_mod can take: attention takes bias=path.transforms(x) and runs "
            "them on its own runner"
        )
