"""The bias kind: an encoding that adds a term to the attention scores before softmax."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ..config import EncodingConfig, check_int
from ..positions import check_batch, position_at
from .encoding import Encoding

__all__ = ["BiasConfig", "BiasEncoding"]


@dataclasses.dataclass(frozen=True)
class BiasConfig(EncodingConfig):
    """Base of the configs of bias encodings: ``n_heads``, the number of attention heads,
    is their first key (each config checks it in its ``__post_init__``)."""

    n_heads: int


class BiasEncoding(Encoding):
    """An encoding that adds one value per head and (query, key) pair to the scores.

    A subclass implements one method, :meth:`bias_at`: the bias as an elementwise function
    of head index, query position and key position. The same code then runs vectorised in
    :meth:`bias` (a materialised ``[heads, q_len, k_len]`` tensor, for short sequences and
    tests) and per score inside flex attention through :meth:`score_mod`, so no
    ``[heads, L, L]`` tensor is ever built on the fast path and the two cannot disagree.

    What else a subclass may declare, each tied to the backend it opens
    (:func:`~posenc.attn.planner.plan` reads them, never the encoding's name):

    ======================  =====================================  ==========================
    hook                    declares                               opens
    ======================  =====================================  ==========================
    ``needs_q``             the bias depends on the queries        (closes the shared table)
    ``shift_invariant``     the bias depends on ``k - q`` only     ``distance`` (``2L - 1``
                                                                   values, with a backward)
    ``invariant_below()``   the same for the queries before a      ``distance`` for those, the
                            position (FIRE's threshold)            ``rows`` for the rest
    ``linear_slopes()``     the bias is ``-m_h (q_pos - k_pos)``   ``linear`` (fused SDPA)
    ``adds_to_values``      a term is added to the output too      ``math`` (and ``shaw``)
    ``value_term()``        that term, from the probabilities      ``math``
    ``relative_tables()``   the bias is Shaw's clipped tables      ``shaw`` (CPU training)
    ``needs_input``         the bias is ``c_i - c_j`` of a clock   extra key coordinates
                            of the layer's input (FoX)             (:mod:`posenc.attn.forget`)
    ``needs_scores``        the bias depends on each row's scores  ``scores`` (blockwise
                            before softmax (CoPE): ``score_bias``  explicit softmax)
    ======================  =====================================  ==========================

    Shapes:
        ``bias(q_positions, k_positions)``: ``[heads, q_len, k_len]`` for 1-D positions,
        ``[batch, heads, q_len, k_len]`` for 2-D ones.
    """

    kind = "bias"
    size_key = "n_heads"
    config: BiasConfig
    #: True when the bias depends on the queries (Shaw): bias() and score_mod() need ``q``
    needs_q: ClassVar[bool] = False
    #: True when the bias depends on ``k_pos - q_pos`` only (T5, KERPLE, ALiBi): over
    #: ``arange(L)`` its table is a Toeplitz matrix of ``2L - 1`` values, which attention
    #: and models then compute once per distance (:mod:`posenc.attn.runners.distance`)
    shift_invariant: ClassVar[bool] = False
    #: True when the bias is ``c_i - c_j`` of a per-token, per-head clock computed from the
    #: layer's input ``x`` (FoX's forget gates): :meth:`clock` gives it, attention takes it
    #: as ``bias=`` (:mod:`posenc.attn.forget`), and a model gives each layer its own
    #: instance, since its parameters read that layer's input
    needs_input: ClassVar[bool] = False
    #: True when the bias depends on every score of its row before the softmax (CoPE's
    #: gates): :meth:`score_bias` gives it, and attention runs it on the explicit softmax by
    #: blocks of query rows (:mod:`posenc.attn.runners.scores`)
    needs_scores: ClassVar[bool] = False

    @property
    def n_heads(self) -> int:
        return self.config.n_heads

    @property
    def adds_to_values(self) -> bool:
        """True when the encoding also adds a term to the attention output (Shaw's values,
        when configured): attention then needs the probabilities and runs on the math path."""
        return False

    def relative_tables(self) -> tuple[torch.Tensor, torch.Tensor | None, int] | None:
        """``(key_table, value_table or None, max_distance)`` when this bias is Shaw's
        relation-aware attention (arXiv:1803.02155): the bias ``q_i · a^K[r_ij] · scale`` and
        the value term ``sum_j P_ij a^V[r_ij]``, with ``r_ij = clip(p_j - p_i, -k, k) + k``
        and tables ``[2k + 1, head_dim]`` shared by the heads. :func:`posenc.attention`
        then trains on the CPU blockwise (:mod:`posenc.attn.runners.shaw`). None (the
        default): not of this form."""
        return None

    def clock(self, x: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """The per-token clock of an encoding with ``needs_input`` (its bias is ``c_i -
        c_j``), continued from ``start``, the clock of the token before ``x``'s first.

        Shapes:
            x ``[batch, seq, dim]``, start ``[batch, heads, 1]`` or None ->
            ``[batch, heads, seq]``.
        """
        raise TypeError(f"{self.info.name!r}'s bias does not depend on the layer's input")

    def score_bias(
        self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor | None
    ) -> torch.Tensor:
        """The bias of an encoding with ``needs_scores``, from the queries and their rows'
        scaled scores over the keys they see (``allowed``: True where seen, or None).

        Shapes:
            q ``[b, heads, q_len, d]``, scores ``[b, heads, q_len, k_len]`` -> the same as
            scores.
        """
        raise TypeError(f"{self.info.name!r}'s bias does not depend on the scores")

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The bias for ``head`` of a query at ``q_pos`` and a key at ``k_pos``.

        Elementwise over broadcastable tensors (integer head indices and integer or float
        positions); it may only use pointwise operations and index parameters by ``head``
        or by integer functions of the positions, because inside flex attention each
        argument is a scalar per score. Read parameters through an index (``p[head]``,
        ``p.view(1)[0]`` for a scalar): a bare 0-d parameter breaks flex's backward, and a
        reduction over a new dimension cannot be lowered inside the kernel (unroll it).
        Returns float32 (float64 for float64 positions).
        """
        raise NotImplementedError

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """The materialised bias: ``[heads, q_len, k_len]``, or ``[batch, heads, q_len,
        k_len]`` when positions are ``[batch, len]``. ``q`` and ``scale`` (the attention's
        score scale) are needed only by biases that depend on the queries (Shaw's
        ``q · a_K * scale``, which overrides this). Costs
        ``heads * q_len * k_len`` memory: the fast path never calls it."""
        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        heads = torch.arange(self.n_heads, device=q_positions.device)
        if q_positions.dim() == 1 and k_positions.dim() == 1:
            h, qp, kp = heads.view(-1, 1, 1), q_positions.view(1, -1, 1), k_positions.view(1, 1, -1)
        else:
            h = heads.view(1, -1, 1, 1)
            qp = q_positions.view(-1, 1, q_positions.shape[-1], 1)  # [b, 1, q_len, 1]
            kp = k_positions.view(-1, 1, 1, k_positions.shape[-1])  # [b, 1, 1, k_len]
        return self.bias_at(h, qp, kp)

    def masked_bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        masked: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`bias` with ``-inf`` where ``masked`` (bool, broadcastable to ``[q_len,
        k_len]``: a key its query may not see), for the blockwise paths that take the bias
        a block of query rows at a time (:mod:`posenc.attn.runners.rows`). An encoding that
        can mask as it computes overrides this, and may return a strided view."""
        bias = self.bias(q_positions, k_positions)
        return bias if masked is None else bias.masked_fill(masked, float("-inf"))

    def invariant_below(self) -> float:
        """The position below which a query's bias depends on ``k_pos - q_pos`` only (with
        every key): ``inf`` where :attr:`shift_invariant`, else 0 (no query) unless an
        encoding says otherwise (FIRE: its threshold ``L``). On the rows path
        (:mod:`posenc.attn.runners.rows`) those queries run on the distance blocks
        (:mod:`posenc.attn.runners.distance`), from ``2n - 1`` values instead of ``n²``."""
        return math.inf if self.shift_invariant else 0.0

    def block_rows(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> tuple[Callable[..., torch.Tensor], list[torch.Tensor]]:
        """The bias a block of query rows at a time, for :mod:`posenc.attn.runners.rows`:
        ``(rows, tensors)``, where ``rows(i0, i1, n, masked, *tensors)`` is
        :meth:`masked_bias` of queries ``i0..i1-1`` over keys ``0..n-1`` and ``tensors``
        what it is computed from. By default the parameters that need a gradient, read
        from the module itself; an encoding that derives something from them once per
        call (FIRE's pieces) overrides this and returns that, so that each block's
        gradient stops there."""

        def rows(i0: int, i1: int, n: int, masked: torch.Tensor | None, *_: torch.Tensor):
            return self.masked_bias(q_positions[..., i0:i1], k_positions[..., :n], masked)

        return rows, [t for t in self.parameters() if t.requires_grad]

    def score_mod(
        self,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        q: torch.Tensor | None = None,
        q_offset: int = 0,
        scale: float | None = None,
    ):
        """A ``torch.nn.attention.flex_attention`` score_mod that adds this bias.

        Positions default to the indices (``q_idx + q_offset`` for queries, as in a KV
        cache where the queries follow ``q_offset`` cached keys); ``[len]`` or
        ``[batch, len]`` tensors give them explicitly.
        """

        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        check_int("q_offset", q_offset, minimum=0)

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = position_at(q_positions, b, q_idx, q_offset)
            k_pos = position_at(k_positions, b, kv_idx)
            return score + self.bias_at(h, q_pos, k_pos).to(score.dtype)

        return mod

    def _check_pair(
        self, q_positions, k_positions, q: torch.Tensor | None = None
    ) -> tuple[Any, Any]:
        """The query and key positions (either may be None: the default) checked, as the
        bias computes with them (integer dtypes as int64): on the device of ``q`` (else of
        the queries' positions, else of the encoding), for ``q``'s queries, and with batch
        sizes that agree (with ``q``'s, else with the queries' positions)."""
        device = None if q is None else q.device
        if q_positions is not None:
            q_len = None if q is None else q.shape[2]
            q_positions = self.check_positions(
                q_positions, seq_len=q_len, name="q_positions", device=device
            )
        if k_positions is not None:
            if device is None and q_positions is not None:
                device = q_positions.device
            k_positions = self.check_positions(k_positions, name="k_positions", device=device)
        batch = None if q is None else q.shape[0]
        if batch is None and q_positions is not None and q_positions.dim() == 2:
            batch = q_positions.shape[0] if q_positions.shape[0] != 1 else None
        for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
            if batch is not None and positions is not None:
                check_batch(positions, batch, name)
        return q_positions, k_positions

    def linear_slopes(self, causal: bool) -> list[float] | None:
        """The per-head slopes ``m_h`` when this bias is ``-m_h · (q_pos - k_pos)`` (0: no
        bias on that head), for attention with or without the causal mask; None (the
        default) when it is not linear in the distance. :func:`posenc.attention` then runs
        it on a fused SDPA path (:mod:`posenc.attn.runners.linear`). Under the causal mask
        the bias need only be linear on keys at or before their query."""
        return None

    def value_term(self, probs: torch.Tensor, q_positions, k_positions) -> torch.Tensor:
        """The term added to the attention output by encodings with ``adds_to_values``.

        Shapes:
            probs ``[batch, heads, q_len, k_len]`` -> ``[batch, heads, q_len, head_dim]``
        """
        raise NotImplementedError
