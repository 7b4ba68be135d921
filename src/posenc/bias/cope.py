"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar 2024,
arXiv:2405.18719): positions counted by gates on the scores, read from learned vectors."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, ScoreBias
from ..config import check_float, check_int
from ..functional.cope import cope_bias, cope_positions
from ..functional.dtypes import math_dtype
from ..positions import causal_mask
from ..registry import register
from .inputs import check_bias_inputs, check_keys_fit, check_scored_inputs

__all__ = ["CoPE"]


@dataclasses.dataclass(frozen=True)
class CopeConfig(BiasConfig):
    """Configuration of :class:`CoPE`.

    Attributes:
        n_heads: attention heads (the position vectors are shared by all of them, as in
            the paper).
        head_dim: size of each head, the width of the position vectors.
        max_pos: ``P``, the number of position vectors: contextual positions past
            ``P - 1`` read the last (x-transformers' default, 16; the paper counts up to
            a few dozen words or sentences).
        init_std: standard deviation of the position vectors' normal initialisation; 0
            (the paper's code) starts them at zero, so CoPE adds nothing until trained.
    """

    n_heads: int
    head_dim: int
    max_pos: int = 16
    init_std: float = 0.0

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("head_dim", self.head_dim)
        check_int("max_pos", self.max_pos)
        check_float("init_std", self.init_std, positive=False)
        if self.init_std < 0:
            raise ValueError(f"init_std must be >= 0, got {self.init_std}")


@register(
    "cope",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Golovneva, Wang, Weston, Sukhbaatar 2024, Contextual Position Encoding, "
    "arXiv:2405.18719",
    summary="positions counted by gates on the scores (σ(q·k) from the key to the query), "
    "read from learned vectors",
    formula=(
        "g_ij = σ(q_i·k_j/√d_h),  p_ij = Σ_{t=j..i} g_it  (a fractional, content-counted "
        "position)\n"
        "s_ij = q_i·k_j/√d_h + q_i·e[p_ij],  e interpolated between rows ⌊p⌋ and ⌈p⌉\n"
        "e: P learned vectors of head_dim shared by the heads; p clamped to P − 1"
    ),
)
class CoPE(ScoreBias, BiasEncoding):
    """Contextual position encoding: each query counts, with the gates ``σ(q_i·k_t·scale)``,
    the keys from ``j`` to itself, and reads the learned vector at that count
    (:mod:`posenc.functional.cope`).

    The bias depends on the queries and on every score of their row (``needs_q``, a
    :class:`~posenc.base.ScoreBias`): :func:`posenc.attention` computes it with the explicit
    softmax, by blocks of query rows under activation checkpointing
    (:mod:`posenc.attn.runners.scores`), so only ``backend="auto"`` or ``"math"`` run it,
    and its memory is a few ``[batch, heads, B, L]`` blocks rather than ``[batch, heads, L,
    L]`` tensors. Positions play no part but the mask's: the keys a query sees are the ones
    it counts.

    Shapes:
        ``bias(q_positions, k_positions, q=q, k=k)``: q ``[batch, n_heads, q_len,
        head_dim]``, k ``[batch, kv_heads, k_len, head_dim]`` -> ``[batch, n_heads, q_len,
        k_len]`` (keys after their query, by position, count nothing); ``table``:
        ``[max_pos, head_dim]``.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("cope", n_heads=4, head_dim=8)
        >>> q = torch.randn(2, 4, 5, 8)
        >>> enc.bias(torch.arange(5), torch.arange(5), q=q, k=q).shape
        torch.Size([2, 4, 5, 5])
        >>> posenc.attention(q, q, q, encoding=enc).shape
        torch.Size([2, 4, 5, 8])
    """

    Config = CopeConfig
    config: CopeConfig
    #: the bias depends on the queries (and, as a ScoreBias, on every score of their row)
    needs_q: ClassVar[bool] = True

    def __init__(self, config: CopeConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        self.table = nn.Parameter(torch.empty(c.max_pos, c.head_dim, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table, std=self.config.init_std)

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    def score_bias(
        self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor | None
    ) -> torch.Tensor:
        """``q_i·e[p_ij]`` of the contextual positions of ``scores`` (the scaled ``q·k``) over
        the keys each query sees (``allowed``, True: seen; None: all), float32 (float64 for
        float64 scores).

        Shapes:
            q ``[b, n_heads, q_len, head_dim]``, scores ``[b, n_heads, q_len, k_len]`` ->
            ``[b, n_heads, q_len, k_len]``.
        """
        return cope_bias(q, self.table, cope_positions(scores, allowed))

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
        *,
        k: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The bias of queries ``q`` over keys ``k``, each query counting the keys at or before
        its position; ``scale`` is the score scale (default ``1/sqrt(head_dim)``).

        Shapes:
            positions ``[len]`` or ``[batch, len]``, q ``[batch, n_heads, q_len, head_dim]``,
            k ``[batch, kv_heads, k_len, head_dim]`` -> ``[batch, n_heads, q_len, k_len]``.
        """
        q, k = check_scored_inputs(self, q, k, self.head_dim)
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        check_keys_fit(q, k, k_positions)
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        dtype = math_dtype(q.dtype, self.table.dtype)
        keys = k.to(dtype).repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        scores = (q.to(dtype) @ keys.transpose(-1, -2)) * scale  # [b, h, q_len, k_len]
        seen = causal_mask(q_positions, k_positions)  # [(b, 1,) q_len, k_len]
        return self.score_bias(q, scores, seen)

    def bias_at(self, head, q_pos, k_pos):
        raise TypeError(
            "cope's bias depends on each row's scores, not on positions: call "
            "bias(q_positions, k_positions, q=q, k=k), or attention"
        )

    def score_mod(self, *args, **kwargs):
        raise TypeError(
            "cope's bias depends on each row's scores before the softmax: no score_mod can "
            "compute it; attention runs it on the explicit softmax, by blocks of rows"
        )
