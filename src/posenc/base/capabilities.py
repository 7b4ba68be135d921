"""What a bias encoding may declare beyond its bias: small optional protocols, each of
which opens a runner of :func:`posenc.attention` (:mod:`posenc.attn.planner` asks for
them with ``isinstance``, never by the encoding's name).

Every bias encoding has its bias (:class:`~posenc.base.bias.BiasEncoding`: ``bias_at``,
``bias``, ``score_mod``, and its rows a block at a time). An encoding adds a capability
by subclassing its protocol, as FlexAttention states a variant as a ``score_mod`` and a
``mask_mod``:

======================  ====================================  ===========================
protocol                declares                              opens
======================  ====================================  ===========================
:class:`ShiftInvariant` the bias depends on ``k - q`` only    ``distance`` (``2L - 1``
                        (ALiBi, T5, KERPLE)                   values, with a backward)
:class:`InvariantBelow` the same for the queries before a     ``distance`` for those, the
                        position (FIRE's threshold)           ``rows`` for the rest
:class:`LinearSlopes`   the bias is ``-m_h (q_pos - k_pos)``  ``linear`` (fused SDPA)
                        (ALiBi)
:class:`RelativeTables` the bias is Shaw's clipped tables,    ``shaw`` (CPU, blockwise);
                        which may add to the values too       ``math`` for the values
:class:`InputBias`      the bias is ``c_i - c_j`` of a clock  extra key coordinates
                        of the layer's input (FoX)            (:mod:`posenc.attn.forget`)
:class:`ScoreBias`      the bias depends on each row's        ``scores`` (the explicit
                        scores before the softmax (CoPE)      softmax by blocks of rows)
:class:`ScoreWeights`   the weights are not a softmax: each   ``weights`` (the weights
                        row's from its scores (stick-         written out by blocks of
                        breaking)                             rows)
``InputTransforms``     the scores pass through transforms    ``path`` (the scores by
                        of the tokens between key and query,  blocks, blocks of rows)
                        from the layer's input (PaTH)
======================  ====================================  ===========================
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "InputBias",
    "InputTransforms",
    "InvariantBelow",
    "LinearSlopes",
    "ReadsInput",
    "RelativeTables",
    "ScoreBias",
    "ScoreWeights",
    "ShiftInvariant",
    "invariant_below",
]


class ShiftInvariant:
    """The bias depends on ``k_pos - q_pos`` only: over ``arange(L)`` its table is a
    Toeplitz matrix of ``2L - 1`` values, which attention and models compute once per
    distance (:mod:`posenc.attn.runners.distance`)."""


class InvariantBelow:
    """The bias of a query depends on ``k_pos - q_pos`` only (with every key) below a
    position (FIRE: its threshold ``L``): those queries run on the distance blocks, the
    others on the rows (:mod:`posenc.attn.runners.rows`)."""

    def invariant_below(self) -> float:
        """The position below which a query's bias is shift-invariant."""
        raise NotImplementedError


class LinearSlopes:
    """The bias is ``-m_h · (q_pos - k_pos)`` for some inputs: :func:`posenc.attention`
    then runs it fused into SDPA (:mod:`posenc.attn.runners.linear`)."""

    def linear_slopes(self, causal: bool) -> list[float] | None:
        """The per-head slopes ``m_h`` (0: no bias on that head), for attention with or
        without the causal mask; None where the bias is not linear in the distance. Under
        the causal mask the bias need only be linear on keys at or before their query."""
        raise NotImplementedError


class RelativeTables:
    """Shaw's relation-aware attention (arXiv:1803.02155): the bias ``q_i · a^K[r_ij] ·
    scale`` and, with a value table, the term ``sum_j P_ij a^V[r_ij]`` added to the output,
    ``r_ij = clip(p_j - p_i, -k, k) + k``. :func:`posenc.attention` runs it blockwise on
    the CPU (:mod:`posenc.attn.runners.shaw`), the value term on the explicit softmax
    elsewhere."""

    @property
    def adds_to_values(self) -> bool:
        """Whether a value table adds a term to the attention output."""
        raise NotImplementedError

    def relative_tables(self) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``(key_table, value_table or None, max_distance)``, tables ``[2k + 1,
        head_dim]`` shared by the heads."""
        raise NotImplementedError

    def value_term(self, probs: torch.Tensor, q_positions: Any, k_positions: Any) -> torch.Tensor:
        """The term added to the attention output.

        Shapes:
            probs ``[batch, heads, q_len, k_len]`` -> ``[batch, heads, q_len, head_dim]``
        """
        raise NotImplementedError


class ReadsInput:
    """The encoding reads the layer's input (FoX's gates, PaTH's transforms): a model gives
    each layer its own instance, since its parameters read that layer's input, and
    computes what attention takes from it (:class:`InputBias`, :class:`InputTransforms`)."""


class InputBias(ReadsInput):
    """The bias is ``c_i - c_j`` of a per-token, per-head clock of the layer's input
    (FoX's forget gates): attention takes the clock as ``bias=``
    (:mod:`posenc.attn.forget`), and a model gives each layer its own instance, since its
    parameters read that layer's input."""

    def clock(self, x: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """The clock of the tokens of ``x``, continued from ``start``, the clock of the
        token before ``x``'s first.

        Shapes:
            x ``[batch, seq, dim]``, start ``[batch, heads, 1]`` or None ->
            ``[batch, heads, seq]``.
        """
        raise NotImplementedError


class InputTransforms(ReadsInput):
    """The score of a query and a key passes through a transform per token between them,
    computed from the layer's input (PaTH: ``q_iᵀ H_i ··· H_{j+1} k_j``): attention takes
    the transforms as ``bias=`` and runs them on the ``path`` runner
    (:mod:`posenc.attn.runners.path`), causal only."""

    def transforms(self, x: torch.Tensor) -> torch.Tensor:
        """The transforms of the tokens of ``x``, one vector per token and key head.

        Shapes:
            x ``[batch, seq, dim]`` -> ``[batch, kv_heads, seq, head_dim]``.
        """
        raise NotImplementedError


class ScoreBias:
    """The bias depends on every score of its row before the softmax (CoPE's gates):
    attention runs it on the explicit softmax by blocks of query rows
    (:mod:`posenc.attn.runners.scores`)."""

    def score_bias(
        self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor | None
    ) -> torch.Tensor:
        """The bias from the queries and their rows' scaled scores over the keys they see
        (``allowed``: True where seen, or None).

        Shapes:
            q ``[b, heads, q_len, d]``, scores ``[b, heads, q_len, k_len]`` -> the same as
            scores.
        """
        raise NotImplementedError


class ScoreWeights:
    """The attention weights are not a softmax of the scores: each row's come from its
    scaled scores over the keys it sees, in key order (stick-breaking: each key, nearest
    first, takes its share of what the nearer ones left). Attention writes them out by
    blocks of query rows (:mod:`posenc.attn.runners.weights`)."""

    def score_weights(
        self, scores: torch.Tensor, seen: torch.Tensor, current: torch.Tensor
    ) -> torch.Tensor:
        """The weights of each query's row over the keys (its own included: the weight its
        own value takes).

        Args:
            scores: the scaled ``q·k`` (after a softcap), float32 or float64.
            seen: True where a query sees a key (its own key included).
            current: True at each query's own key.

        Shapes:
            scores ``[b, heads, q_len, k_len]``, seen and current broadcastable to it -> the
            weights, ``[b, heads, q_len, k_len]``.
        """
        raise NotImplementedError


def invariant_below(encoding: object) -> float:
    """The position below which ``encoding``'s bias is shift-invariant: ``inf`` for a
    :class:`ShiftInvariant` one, its own for :class:`InvariantBelow`, else 0 (no query)."""
    if isinstance(encoding, ShiftInvariant):
        return math.inf
    if isinstance(encoding, InvariantBelow):
        return encoding.invariant_below()
    return 0.0
