"""What the layers of one forward share about their attention: positions and masks.

:class:`AttentionContext` is built once per forward (by :func:`posenc.attention` for a
single call, by :class:`~posenc.models.TransformerLM` for all its layers) from the
positions, the padding mask and the segment ids; every backend then takes its mask from it
(:meth:`AttentionContext.allowed` builds the dense one once and keeps it, and
:meth:`AttentionContext.block_mask` flex attention's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..positions import AttnPositions, query_offset
from .flex import flex_block_mask
from .masks import Masks, open_dead_rows
from .pattern import FULL, AttnPattern, pattern_mask

__all__ = ["AttentionContext"]


@dataclass(frozen=True, eq=False)
class AttentionContext:
    """The positions and masks of the attention calls of one forward.

    Attributes:
        positions: the queries' and keys' positions (:class:`~posenc.positions.AttnPositions`).
        masks: the padding and segment masks (:class:`~posenc.attn.masks.Masks`), or None.

    Example:
        >>> ctx = AttentionContext.build(3, 3, batch=1, device=torch.device("cpu"))
        >>> ctx.allowed(causal=True)[0].int().tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """

    positions: AttnPositions
    masks: Masks | None
    #: dense masks already built, by ``(causal, pattern)``
    _dense: dict[tuple[bool, AttnPattern], tuple[torch.Tensor, torch.Tensor]] = field(
        default_factory=dict, repr=False
    )
    #: flex block masks already built, by ``(batch, causal, pattern)``
    _blocks: dict[tuple[int, bool, AttnPattern], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        q_len: int,
        k_len: int,
        batch: int,
        device: torch.device,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> AttentionContext:
        """Check and default the arguments of :func:`posenc.attention` of those names.

        Shapes:
            positions ``[len]`` or ``[1 | batch, len]``; key_padding_mask ``[batch, k_len]``;
            segment_ids ``[batch, seq]`` or ``([batch, q_len], [batch, k_len])``.
        """
        positions = AttnPositions.build(q_len, k_len, batch, device, q_positions, k_positions)
        masks = Masks.build(key_padding_mask, segment_ids, batch, q_len, k_len, device)
        return cls(positions, masks)

    def last_keys(self, n: int) -> AttentionContext:
        """This context over its last ``n`` keys only (a rolling KV cache's layer sees no
        older one): the same queries, the keys' positions and masks cut to the last ``n``,
        and the positions explicit (they no longer start at zero); itself when ``n`` is
        every key. Its masks are built anew."""
        p = self.positions
        if n == p.k_len:
            return self
        if not p.q_len <= n < p.k_len:
            raise ValueError(f"last_keys takes q_len <= n < k_len ({p.q_len}, {p.k_len}), got {n}")
        positions = AttnPositions(p.q, p.k[..., -n:], explicit=True)
        masks = self.masks
        if masks is not None:
            kpm = masks.key_padding_mask
            masks = Masks(
                None if kpm is None else kpm[:, -n:],
                masks.q_segments,
                None if masks.k_segments is None else masks.k_segments[:, -n:],
            )
        return AttentionContext(positions, masks)

    def allowed(
        self, causal: bool, pattern: AttnPattern = FULL
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The dense mask, ``(allowed, dead)``: True where a query may see a key (the
        causal mask and the window or chunk by positions, padding and segments), with the
        rows that see no key opened and flagged in ``dead``
        (:func:`~posenc.attn.masks.open_dead_rows`: the runner zeroes them); None when
        nothing is masked. Built on first use and kept for the other layers with the same
        pattern (not while compiling: the graph builds it).

        Shapes:
            allowed ``[q_len, k_len]`` or ``[batch | 1, 1, q_len | 1, k_len]``; dead the
            same with one key.
        """
        if self.masks is None and not causal and not pattern.local:
            return None
        compiling = torch.compiler.is_compiling()
        key = (causal, pattern)
        if key in self._dense and not compiling:
            return self._dense[key]
        q, k = self.positions.q, self.positions.k
        if self.masks is None:
            dense = pattern_mask(pattern, q, k, causal)
            assert dense is not None, "causal or a local pattern: something is masked"
        else:
            dense = self.masks.dense(q, k, causal, pattern)
        built = open_dead_rows(dense)
        if not compiling:
            self._dense[key] = built
        return built

    def block_mask(self, batch: int, causal: bool, pattern: AttnPattern = FULL) -> Any:
        """The flex-attention block mask of the same mask
        (:func:`~posenc.attn.flex.flex_block_mask`; None when nothing is masked), built on
        first use and kept for the other layers with the same pattern (not while
        compiling)."""
        compiling = torch.compiler.is_compiling()
        key = (batch, causal, pattern)
        if key in self._blocks and not compiling:
            return self._blocks[key]
        p = self.positions
        q_offset = query_offset(p.q_len, p.k_len) if not p.explicit else 0
        qp, kp = (p.q, p.k) if p.explicit else (None, None)  # None: indices, a cached mask
        mask_mod = None
        if self.masks is not None:
            mask_mod = self.masks.mask_mod(qp, kp, q_offset, causal, pattern)
        shape = (batch, p.q_len, p.k_len, p.q.device)
        built = flex_block_mask(*shape, qp, kp, causal, mask_mod, pattern)
        if not compiling:
            self._blocks[key] = built
        return built
