"""Stick-breaking attention (Tan, Shen, Yang, Panda, Courville, ICLR 2025,
arXiv:2410.17980): weights from a stick broken by the keys, nearest first; no positions."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch

from ..arguments import check_str
from ..base import BiasConfig, BiasEncoding, ScoreWeights
from ..config import check_bool, check_choice, check_int
from ..functional.dtypes import math_dtype
from ..functional.stick_breaking import own_keys, stick_breaking_weights
from ..positions import causal_mask
from ..registry import register
from .inputs import check_bias_inputs, check_keys_fit, check_scored_inputs

__all__ = ["StickBreaking"]

#: what the rest of the stick does: weigh the query's own value, or nothing
REMAINDERS = ("current", "drop")


@dataclasses.dataclass(frozen=True)
class StickBreakingConfig(BiasConfig):
    """Configuration of :class:`StickBreaking`.

    Attributes:
        n_heads: attention heads (checked against the queries; the weights have no
            parameters).
        attend_current: whether the query's own key breaks the stick first; False (the
            paper's ``j < i``): only the keys before it do.
        remainder: what is left of the stick after every key: ``"current"`` weighs the
            query's own value with it, so every row sums to one and a first token reads its
            own value; ``"drop"`` leaves it out (the paper's equation as written: rows sum
            to at most one, and a first token's output is zero).
    """

    n_heads: int
    attend_current: bool = False
    remainder: str = "current"

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_bool("attend_current", self.attend_current)
        check_str("remainder", self.remainder)
        check_choice("remainder", self.remainder, REMAINDERS)


@register(
    "stick_breaking",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="Tan, Shen, Yang, Panda, Courville 2025, Scaling Stick-Breaking Attention: An "
    "Efficient Implementation and In-depth Study, ICLR 2025, arXiv:2410.17980",
    summary="weights from a stick broken by the keys, nearest first: β = σ(q·k) of what the "
    "nearer keys left; no softmax and no positions",
    formula=(
        "β_ij = σ(q_i·k_j/√d_h)\n"
        "A_ij = β_ij · Π_{j<k<i} (1 − β_ik)   over the keys the query sees, nearest first\n"
        "o_i = Σ_{j<i} A_ij v_j + (1 − Σ_j A_ij) v_i   (remainder='current')"
    ),
)
class StickBreaking(ScoreWeights, BiasEncoding):
    """Stick-breaking attention: the softmax is replaced by a stick-breaking process over the
    keys, from the nearest to the farthest (:mod:`posenc.functional.stick_breaking`).

    A key's weight is its share ``σ(q·k·scale)`` of what the nearer keys left, so recency is
    built into the weights and no positional encoding is needed; the paper reports it at or
    above softmax with RoPE, and better past the training length. The weights depend on
    every score of a row (a :class:`~posenc.base.ScoreWeights`): :func:`posenc.attention`
    writes them out by blocks of query rows (:mod:`posenc.attn.runners.weights`), causal
    only, on ``backend="auto"`` or ``"math"``; a model's KV cache decodes with them as
    recomputation does. Positions play no part but the mask's and which key is the query's
    own (the one at its position); the keys break the stick in the order they are held, the
    sequence's (a model keeps every key of such a layer: a rolling buffer's slots wrap).

    Shapes:
        ``weights(q_positions, k_positions, q=q, k=k)``: q ``[batch, n_heads, q_len,
        head_dim]``, k ``[batch, kv_heads, k_len, head_dim]`` -> ``[batch, n_heads, q_len,
        k_len]``.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("stick_breaking", n_heads=4)
        >>> q = torch.randn(2, 4, 5, 8)
        >>> w = enc.weights(torch.arange(5), torch.arange(5), q=q, k=q)
        >>> w.shape, bool(torch.allclose(w.sum(-1), torch.ones(2, 4, 5)))
        (torch.Size([2, 4, 5, 5]), True)
        >>> posenc.attention(q, q, q, encoding=enc).shape
        torch.Size([2, 4, 5, 8])
    """

    Config = StickBreakingConfig
    config: StickBreakingConfig
    #: the weights depend on the queries (and on every score of their row)
    needs_q: ClassVar[bool] = True

    def score_weights(
        self, scores: torch.Tensor, seen: torch.Tensor, current: torch.Tensor
    ) -> torch.Tensor:
        """The stick-breaking weights of ``scores`` (scaled ``q·k``) over the keys each
        query sees (``seen``), its own key at ``current``.

        Shapes:
            scores ``[b, n_heads, q_len, k_len]``, seen and current broadcastable to it ->
            ``[b, n_heads, q_len, k_len]``.
        """
        c = self.config
        return stick_breaking_weights(
            scores,
            seen,
            current,
            attend_current=c.attend_current,
            remainder=c.remainder == "current",
        )

    def weights(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
        *,
        k: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The attention weights of queries ``q`` over keys ``k`` (the queries the last of
        the keys), each query seeing the keys at or before its position, its own key the
        one at its position; ``scale`` is the score scale (default ``1/sqrt(head_dim)``).

        Shapes:
            positions ``[len]`` or ``[batch, len]``, q ``[batch, n_heads, q_len, head_dim]``,
            k ``[batch, kv_heads, k_len, head_dim]`` -> ``[batch, n_heads, q_len, k_len]``.
        """
        q, k = check_scored_inputs(self, q, k, None)
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        check_keys_fit(q, k, k_positions)
        q_len, k_len = q.shape[2], k.shape[2]
        if q_len > k_len:
            raise ValueError(
                f"q has {q_len} positions but k only {k_len}: the queries are the last of the keys"
            )
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        dtype = math_dtype(q.dtype, k.dtype)
        keys = k.to(dtype).repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        scores = (q.to(dtype) @ keys.transpose(-1, -2)) * scale
        seen = causal_mask(q_positions, k_positions)
        return self.score_weights(scores, seen, own_keys(q_positions, k_positions))

    def bias(self, *args, **kwargs) -> torch.Tensor:
        raise TypeError(
            "stick_breaking adds no bias: its weights replace the softmax; call "
            "weights(q_positions, k_positions, q=q, k=k), or attention"
        )

    def bias_at(self, head, q_pos, k_pos):
        raise TypeError(
            "stick_breaking adds no bias: its weights depend on every score of their row; "
            "call weights(q_positions, k_positions, q=q, k=k), or attention"
        )

    def score_mod(self, *args, **kwargs):
        raise TypeError(
            "stick_breaking's weights are not a softmax: no score_mod can compute them; "
            "attention writes them out by blocks of rows"
        )
