"""Which keys a query sees, in one place: the causal order, a window or a chunk, padding,
packed documents, and the forms every runner takes them in.

- :class:`AttnPattern`: the part of the mask that models set per layer, decided by the
  positions of query and key (as the causal mask is, so explicit positions, packed
  documents and KV caches follow it with nothing else to do). ``window=W``, causal: a
  query at position ``i`` sees keys ``j`` with ``i - W < j <= i``, the last ``W``
  positions including its own (Mistral 7B, Jiang et al. 2023, arXiv:2310.06825; Gemma
  2/3's local layers; gpt-oss's banded layers); ``window=W``, not causal: ``|i - j| <=
  W // 2`` (ModernBERT's local attention, Warner et al. 2024, arXiv:2412.13663);
  ``chunk=C``: ``i // C == j // C``, with the causal order when causal (Llama 4's chunked
  attention, 8,192 tokens). :meth:`AttnPattern.visible` is one elementwise rule on
  position tensors, so the dense mask and flex attention's ``mask_mod`` read the same code.
- :class:`Masks`: the padding (``key_padding_mask[b, j]`` True for a real token) and
  packed-document (the same segment id) parts of one call, as a dense boolean mask for
  SDPA and the explicit softmax (:meth:`Masks.dense`) and as a ``mask_mod`` for flex
  attention (:meth:`Masks.mask_mod`), which lets the block mask skip whole blocks.
- :func:`flex_block_mask`: flex attention's block mask of a call (the default positions'
  one cached per shape): blocks the window or chunk hides are skipped, so a sliding window
  costs ``O(L·W)``.
- :class:`AttentionContext`: what the layers of one forward share, built once (by
  :func:`posenc.attention` for a single call, by :class:`~posenc.models.TransformerLM` for
  all its layers): the positions and masks, the dense mask (:meth:`AttentionContext.allowed`)
  and the block mask (:meth:`AttentionContext.block_mask`), each built on first use.

A query may see a key when every mask that is given allows it. A query that may see no
key has its row opened and zeroed after (:func:`open_dead_rows`, :func:`zero_dead_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..arguments import check_tensor
from ..config import check_int
from ..positions import (
    AttnPositions,
    check_padding_mask,
    check_segment_ids,
    position_at,
    query_offset,
)
from .dead_rows import open_dead_rows, zero_dead_rows
from .flex_masks import flex_block_mask

__all__ = [
    "FULL",
    "AttentionContext",
    "AttnPattern",
    "Masks",
    "flex_block_mask",
    "open_dead_rows",
    "pattern_mask",
    "zero_dead_rows",
]


@dataclass(frozen=True)
class AttnPattern:
    """A sliding window or a chunk (or neither: every causal key, or every key).

    Attributes:
        window: the window size ``W >= 1``, or None.
        chunk: the chunk size ``C >= 1``, or None; not with ``window``.

    Example:
        >>> p = AttnPattern(window=2)
        >>> q, k = torch.arange(4)[:, None], torch.arange(4)[None, :]
        >>> p.visible(q, k, causal=True).int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """

    window: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        if self.window is not None:
            check_int("window", self.window)
        if self.chunk is not None:
            check_int("chunk", self.chunk)
        if self.window is not None and self.chunk is not None:
            raise ValueError(
                f"window ({self.window}) and chunk ({self.chunk}) are two patterns: give one"
            )

    @property
    def local(self) -> bool:
        """Whether a window or chunk hides keys beyond the causal mask."""
        return self.window is not None or self.chunk is not None

    def visible(
        self, q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool
    ) -> torch.Tensor | None:
        """True where a query at ``q_pos`` sees a key at ``k_pos`` (broadcast together);
        None when every key is seen (not causal, no window, no chunk)."""
        seen = None
        if causal:
            seen = k_pos <= q_pos
        if self.window is not None:
            if causal:
                near = k_pos > q_pos - self.window
            else:
                near = (q_pos - k_pos).abs() <= self.window // 2
            seen = near if seen is None else seen & near
        if self.chunk is not None:
            same = torch.div(q_pos, self.chunk, rounding_mode="floor") == torch.div(
                k_pos, self.chunk, rounding_mode="floor"
            )
            seen = same if seen is None else seen & same
        return seen

    def describe(self) -> str:
        """``"window 128"``, ``"chunk 8192"`` or ``"full"``."""
        if self.window is not None:
            return f"window {self.window}"
        if self.chunk is not None:
            return f"chunk {self.chunk}"
        return "full"


#: no window and no chunk: every causal key (or every key)
FULL = AttnPattern()


def pattern_mask(
    pattern: AttnPattern, q_positions: torch.Tensor, k_positions: torch.Tensor, causal: bool
) -> torch.Tensor | None:
    """The dense form of :meth:`AttnPattern.visible`: True where a query sees a key.

    Shapes:
        q_positions ``[q_len]`` or ``[batch, q_len]``; k_positions ``[k_len]`` or
        ``[batch, k_len]`` -> ``[q_len, k_len]`` or ``[batch, 1, q_len, k_len]``, or None
        when every key is seen.
    """
    seen = pattern.visible(q_positions.unsqueeze(-1), k_positions.unsqueeze(-2), causal)
    if seen is not None and seen.dim() == 3:
        seen = seen.unsqueeze(-3)  # [b, 1, q, k]: one mask for every head
    return seen


@dataclass(frozen=True)
class Masks:
    """The padding, segment and given masks of one attention call.

    Shapes:
        key_padding_mask ``[batch, k_len]`` bool (True = a real token) or None;
        q_segments ``[batch, q_len]`` and k_segments ``[batch, k_len]`` integers, or None;
        attn_mask ``[batch, 1, q_len, k_len]`` bool (True = the query may see the key, as
        SDPA's boolean ``attn_mask``; a mask made by another library, transformers'), or
        None.
    """

    key_padding_mask: torch.Tensor | None = None
    q_segments: torch.Tensor | None = None
    k_segments: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None

    @classmethod
    def build(
        cls,
        key_padding_mask: torch.Tensor | None,
        segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None,
        batch: int,
        q_len: int,
        k_len: int,
        device: torch.device | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> Masks | None:
        """Validate the arguments of :func:`posenc.attention` (None when all are None).

        ``segment_ids`` is ``[batch, seq]`` when queries and keys are the same tokens, or
        a pair ``(q_segment_ids, k_segment_ids)`` (a KV cache: the keys include the cached
        tokens); a single tensor with ``q_len != k_len`` is refused rather than guessed.
        ``attn_mask`` is ``[batch | 1, 1, q_len, k_len]`` bool; a batch of one is expanded
        (a view).
        """
        if key_padding_mask is None and segment_ids is None and attn_mask is None:
            return None
        if attn_mask is not None:
            attn_mask = _check_attn_mask(attn_mask, batch, q_len, k_len, device)
        if key_padding_mask is not None:
            if isinstance(key_padding_mask, torch.Tensor) and key_padding_mask.dtype != torch.bool:
                raise TypeError(
                    f"key_padding_mask must be a bool tensor (True = a real token), got "
                    f"{key_padding_mask.dtype}"
                )
            check_padding_mask(key_padding_mask, "key_padding_mask")
            _check_size("key_padding_mask", key_padding_mask, batch, k_len, "k", device)
        q_ids = k_ids = None
        if segment_ids is not None:
            if isinstance(segment_ids, (tuple, list)):
                if len(segment_ids) != 2:
                    raise ValueError(
                        "segment_ids must be a [batch, seq] tensor or a pair "
                        f"(q_segment_ids, k_segment_ids), got {len(segment_ids)} items"
                    )
                q_ids, k_ids = segment_ids
            else:
                if q_len != k_len:
                    raise ValueError(
                        f"segment_ids is one tensor but q has {q_len} tokens and k {k_len}: "
                        "pass (q_segment_ids, k_segment_ids)"
                    )
                q_ids = k_ids = segment_ids
            check_segment_ids(q_ids, "segment_ids (queries)")
            check_segment_ids(k_ids, "segment_ids (keys)")
            _check_size("segment_ids (queries)", q_ids, batch, q_len, "q", device)
            _check_size("segment_ids (keys)", k_ids, batch, k_len, "k", device)
        return cls(key_padding_mask, q_ids, k_ids, attn_mask)

    def dense(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        causal: bool,
        pattern: AttnPattern | None = None,
    ) -> torch.Tensor:
        """True where a query may see a key: the causal mask and the pattern (window or
        chunk, :class:`AttnPattern`) by positions, padding and segments together.

        Shapes:
            positions ``[len]`` or ``[batch, len]`` -> bool, broadcastable to
            ``[batch, 1, q_len, k_len]`` (``[batch, 1, 1, k_len]`` for padding alone,
            without the causal mask).
        """
        pattern = FULL if pattern is None else pattern  # not a default: dynamo 2.11
        allowed = pattern_mask(pattern, q_positions, k_positions, causal)  # [(b, 1,) q, k]
        if self.key_padding_mask is not None:
            real = self.key_padding_mask[:, None, None, :]  # [b, 1, 1, k]
            allowed = real if allowed is None else allowed & real
        if self.q_segments is not None and self.k_segments is not None:  # set together
            same = self.q_segments[:, None, :, None] == self.k_segments[:, None, None, :]
            allowed = same if allowed is None else allowed & same  # [b, 1, q, k]
        if self.attn_mask is not None:
            allowed = self.attn_mask if allowed is None else allowed & self.attn_mask
        assert allowed is not None, "build() makes Masks only with a mask in it"
        return allowed

    def mask_mod(
        self,
        q_positions: torch.Tensor | None,
        k_positions: torch.Tensor | None,
        q_offset: int,
        causal: bool,
        pattern: AttnPattern | None = None,
    ):
        """The same mask as :meth:`dense` as a flex-attention ``mask_mod``; positions None
        are the default layout (``q_idx + q_offset`` and ``kv_idx``)."""
        pattern = FULL if pattern is None else pattern  # not a default: dynamo 2.11
        kpm, q_ids, k_ids = self.key_padding_mask, self.q_segments, self.k_segments
        given = self.attn_mask

        def mask_mod(b, h, q_idx, kv_idx):
            k_pos = position_at(k_positions, b, kv_idx)
            allowed = pattern.visible(position_at(q_positions, b, q_idx, q_offset), k_pos, causal)
            if kpm is not None:
                real = kpm[b, kv_idx]
                allowed = real if allowed is None else allowed & real
            if q_ids is not None:
                same = q_ids[b, q_idx] == k_ids[b, kv_idx]
                allowed = same if allowed is None else allowed & same
            if given is not None:
                seen = given[b, 0, q_idx, kv_idx]
                allowed = seen if allowed is None else allowed & seen
            return allowed

        return mask_mod


def _check_attn_mask(
    mask: torch.Tensor, batch: int, q_len: int, k_len: int, device: torch.device | None
) -> torch.Tensor:
    """``attn_mask`` checked (a bool tensor ``[batch | 1, 1, q_len, k_len]`` on ``device``)
    and expanded to ``batch``."""
    check_tensor("attn_mask", mask, kinds=("bool",))  # True = may attend
    shape = tuple(mask.shape)
    if len(shape) != 4 or shape[0] not in (1, batch) or shape[1:] != (1, q_len, k_len):
        raise ValueError(
            f"attn_mask must be [batch | 1, 1, q_len, k_len] = [{batch} | 1, 1, {q_len}, "
            f"{k_len}], got {tuple(mask.shape)}"
        )
    if device is not None and mask.device != device:
        raise ValueError(
            f"attn_mask is on {mask.device} but q is on {device}: move attn_mask there"
        )
    return mask.expand(batch, 1, q_len, k_len)


def _check_size(
    name: str, t: torch.Tensor, batch: int, length: int, of: str, device: torch.device | None
) -> None:
    if tuple(t.shape) != (batch, length):
        raise ValueError(
            f"{name} must be [batch, {of}_len] = [{batch}, {length}], got {tuple(t.shape)}"
        )
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but {of} is on {device}: move {name} there")


@dataclass(frozen=True, eq=False)
class AttentionContext:
    """The positions and masks of the attention calls of one forward.

    Attributes:
        positions: the queries' and keys' positions (:class:`~posenc.positions.AttnPositions`).
        masks: the padding and segment masks (:class:`Masks`), or None.

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
    #: other values of these positions and masks a runner keeps (:meth:`derived`)
    _derived: dict[Any, Any] = field(default_factory=dict, repr=False)

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
        attn_mask: torch.Tensor | None = None,
    ) -> AttentionContext:
        """Check and default the arguments of :func:`posenc.attention` of those names, and
        ``attn_mask``, a boolean mask made elsewhere (transformers' for its attention
        functions: :mod:`posenc.hf.backend`), ANDed with the others.

        Shapes:
            positions ``[len]`` or ``[1 | batch, len]``; key_padding_mask ``[batch, k_len]``;
            segment_ids ``[batch, seq]`` or ``([batch, q_len], [batch, k_len])``;
            attn_mask ``[batch | 1, 1, q_len, k_len]``.
        """
        positions = AttnPositions.build(q_len, k_len, batch, device, q_positions, k_positions)
        masks = Masks.build(
            key_padding_mask, segment_ids, batch, q_len, k_len, device, attn_mask=attn_mask
        )
        return cls(positions, masks)

    @classmethod
    def default(cls, q_len: int, k_len: int, batch: int, device: torch.device) -> AttentionContext:
        """:meth:`build` with no positions or masks: the queries the last ``q_len`` of the
        ``k_len`` keys. Built once per lengths, batch, device and inference mode and given
        again (with the dense and block masks it has built since) while its scores are few
        (:data:`DEFAULT_CONTEXT_SCORES`), where a call's host time is what counts; at most
        :data:`DEFAULT_CONTEXTS` are kept. Not while ``torch.compile`` traces
        (the graph builds it)."""
        if torch.compiler.is_compiling() or q_len * k_len > DEFAULT_CONTEXT_SCORES:
            return cls.build(q_len, k_len, batch, device)
        key = (q_len, k_len, batch, device, torch.is_inference_mode_enabled())
        kept = _DEFAULTS.get(key)
        if kept is None:
            if len(_DEFAULTS) >= DEFAULT_CONTEXTS:
                _DEFAULTS.popitem()  # one atomic step: safe across threads
            kept = _DEFAULTS[key] = cls.build(q_len, k_len, batch, device)
        return kept

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
                None if masks.attn_mask is None else masks.attn_mask[..., -n:],
            )
        return AttentionContext(positions, masks)

    def derived(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, a value of these positions and masks alone (a small call's linear
        bias): made at the first layer that asks and kept, by ``key`` and inference mode,
        for the others (made anew while compiling: the graph computes it)."""
        if torch.compiler.is_compiling():
            return make()
        key = (key, torch.is_inference_mode_enabled())
        value = self._derived.get(key)
        if value is None:
            value = self._derived[key] = make()
        return value

    def allowed(
        self, causal: bool, pattern: AttnPattern | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The dense mask, ``(allowed, dead)``: True where a query may see a key (the
        causal mask and the window or chunk by positions, padding and segments), with the
        rows that see no key opened and flagged in ``dead``
        (:func:`open_dead_rows`: the runner zeroes them); None when
        nothing is masked. Built on first use and kept for the other layers with the same
        pattern (not while compiling: the graph builds it).

        Shapes:
            allowed ``[q_len, k_len]`` or ``[batch | 1, 1, q_len | 1, k_len]``; dead the
            same with one key.
        """
        pattern = FULL if pattern is None else pattern  # not a default: dynamo 2.11
        if self.masks is None and not causal and not pattern.local:
            return None
        compiling, key = torch.compiler.is_compiling(), (causal, pattern)
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

    def block_mask(self, batch: int, causal: bool, pattern: AttnPattern | None = None) -> Any:
        """The flex-attention block mask of the same mask
        (:func:`flex_block_mask`; None when nothing is masked), built on
        first use and kept for the other layers with the same pattern (not while
        compiling)."""
        pattern = FULL if pattern is None else pattern  # not a default: dynamo 2.11
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


#: :meth:`AttentionContext.default` keeps the contexts of calls of at most this many scores
#: per head (``q_len * k_len``)
DEFAULT_CONTEXT_SCORES = 1 << 16
#: the most default contexts kept (once full, the latest kept one makes room)
DEFAULT_CONTEXTS = 32
_DEFAULTS: dict[tuple, AttentionContext] = {}
