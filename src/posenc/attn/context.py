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

from ..positions import AttnPositions, causal_mask, query_offset
from .flex import flex_block_mask
from .masks import Masks, open_dead_rows

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
    #: dense masks already built, by ``causal``
    _dense: dict[bool, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)
    #: flex block masks already built, by ``causal``
    _blocks: dict[bool, Any] = field(default_factory=dict, repr=False)

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

    def allowed(self, causal: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The dense mask, ``(allowed, dead)``: True where a query may see a key (the
        causal mask by positions, padding and segments), with the rows that see no key
        opened and flagged in ``dead`` (:func:`~posenc.attn.masks.open_dead_rows`: the
        runner zeroes them); None when nothing is masked. Built on first use and kept for
        the other layers (not while compiling: the graph builds it).

        Shapes:
            allowed ``[q_len, k_len]`` or ``[batch | 1, 1, q_len | 1, k_len]``; dead the
            same with one key.
        """
        if self.masks is None and not causal:
            return None
        compiling = torch.compiler.is_compiling()
        if causal in self._dense and not compiling:
            return self._dense[causal]
        q, k = self.positions.q, self.positions.k
        dense = causal_mask(q, k) if self.masks is None else self.masks.dense(q, k, causal)
        built = open_dead_rows(dense)
        if not compiling:
            self._dense[causal] = built
        return built

    def block_mask(self, batch: int, causal: bool) -> Any:
        """The flex-attention block mask of the same mask
        (:func:`~posenc.attn.flex.flex_block_mask`; None when nothing is masked), built on
        first use and kept for the other layers (not while compiling)."""
        compiling = torch.compiler.is_compiling()
        if causal in self._blocks and not compiling:
            return self._blocks[causal]
        p = self.positions
        q_offset = query_offset(p.q_len, p.k_len) if not p.explicit else 0
        qp, kp = (p.q, p.k) if p.explicit else (None, None)  # None: indices, a cached mask
        mask_mod = None if self.masks is None else self.masks.mask_mod(qp, kp, q_offset, causal)
        built = flex_block_mask(batch, p.q_len, p.k_len, p.q.device, qp, kp, causal, mask_mod)
        if not compiling:
            self._blocks[causal] = built
        return built
