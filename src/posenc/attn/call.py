"""One attention call as every runner takes it: its tensors, its encoding, its positions
and masks, and what it does to its scores.

:class:`Call` is what :func:`posenc.attention` checked; :func:`~posenc.attn.planner.plan`
reads its :meth:`~Call.facts`, and a runner (:data:`~posenc.attn.runners.RUNNERS`) takes it
with the plan: ``run(call, plan) -> [batch, heads, q_len, head_dim]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..base import BiasEncoding, InputBias
from ..functional.fox import forget_bias
from .masks import FULL, AttentionContext, AttnPattern

__all__ = ["PLAIN", "PLAIN_TRAITS", "AttnShape", "Call", "ScoreOptions", "ScoreTraits"]


class AttnShape(NamedTuple):
    """The sizes of one attention call: q ``[batch, heads, q_len, head_dim]``, k and v
    ``[batch, kv_heads, k_len, head_dim]``."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor) -> AttnShape:
        b, h, q_len, d = q.shape
        return cls(b, h, k.shape[1], q_len, k.shape[2], d)


@dataclass(frozen=True, eq=False)
class ScoreOptions:
    """What one attention call does to its scores beyond the encoding: the pattern, the
    soft cap and the sinks (checked by :func:`posenc.attention`).

    Attributes:
        pattern: the window or chunk.
        softcap: scores become ``softcap * tanh(s / softcap)``, or None.
        sinks: ``[heads]`` logits that join the softmax and read no value, or None.
    """

    # no defaults: torch 2.11's dynamo cannot wrap a dataclass's default AttnPattern (a
    # compiled attention() that builds one broke its graph)
    pattern: AttnPattern
    softcap: float | None
    sinks: torch.Tensor | None

    def traits(self, finite: bool = True) -> ScoreTraits:
        """What the plan reads of these options (whether sinks are given, not their
        values), with whether the inputs are ``finite``."""
        return ScoreTraits(self.pattern, self.softcap, self.sinks is not None, finite)


#: no pattern, no cap, no sinks
PLAIN = ScoreOptions(FULL, None, None)


class ScoreTraits(NamedTuple):
    """What :func:`plan` reads of a call beyond its sizes, positions and masks; hashable,
    so a model keys its shared bias tables by it.

    Attributes:
        pattern: the window or chunk (a local one counts as a mask).
        softcap: the soft cap, or None.
        sinks: whether sinks are given.
        finite: whether every query, key and value is finite (else only ``math`` runs).
    """

    pattern: AttnPattern  # no defaults: as ScoreOptions
    softcap: float | None
    sinks: bool
    finite: bool

    @property
    def modified(self) -> bool:
        """Whether the scores or the softmax change (softcap, sinks): fused SDPA cannot."""
        return self.softcap is not None or self.sinks


#: a call with no pattern, cap or sinks, whose inputs are finite
PLAIN_TRAITS = ScoreTraits(FULL, None, False, True)


@dataclass(frozen=True, eq=False)
class Call:
    """One attention call, checked.

    Attributes:
        q: ``[batch, heads, q_len, head_dim]``; k, v: ``[batch, kv_heads, k_len, head_dim]``
            (v may be narrower: PoPE's values keep the input width).
        encoding: the bias encoding, or None (none, or a rotary one that rotated q and k).
        context: the positions and masks.
        causal: whether a query sees only the keys at its position and before.
        scale: the score scale.
        backend: the backend asked for (``"auto"``, ``"flex"``, ``"sdpa"``, ``"math"``).
        table: the bias table the caller computed (FoX: its clock), or None.
        options: the window or chunk, softcap and sinks.
        finite: whether q, k, v (and FoX's clock) are all finite.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    encoding: BiasEncoding | None
    context: AttentionContext
    causal: bool
    scale: float
    backend: str  # no defaults: as ScoreOptions
    table: torch.Tensor | None
    options: ScoreOptions
    finite: bool

    def bias_table(self) -> torch.Tensor:
        """The materialised bias: the caller's table, FoX's ``c_i - c_j`` of its clock, or
        ``encoding.bias`` of the positions. Shapes: -> ``[(b,) h, q_len, k_len]``."""
        enc = self.encoding
        assert enc is not None, "a plan with a table has a bias encoding"
        if isinstance(enc, InputBias):
            clock = self.table  # [b, h, k_len]; the queries are the last q_len tokens
            assert clock is not None, "posenc.attention checks that FoX's clock is given"
            return forget_bias(clock[..., clock.shape[-1] - self.q.shape[2] :], clock)
        if self.table is not None:
            return self.table
        p = self.context.positions
        return enc.bias(p.q, p.k, q=self.q, scale=self.scale)
