"""Attention masks: causal order, padding and packed documents, in one place.

A query may see a key when every mask that is given allows it:

- causal: ``k_position <= q_position``;
- padding: the key is a real token (``key_padding_mask[b, j]`` is True);
- packed documents: query and key carry the same segment id.

:class:`Masks` holds the padding and segment parts for one attention call and gives them
to every backend in its own form: a dense boolean mask for SDPA and the math path
(:meth:`Masks.dense`) and a ``mask_mod`` for flex attention (:meth:`Masks.mask_mod`), which
lets the block mask skip whole blocks of other documents and of padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..positions import check_padding_mask, check_segment_ids, position_at
from .pattern import FULL, AttnPattern, pattern_mask

__all__ = ["Masks", "open_dead_rows", "zero_dead_rows"]


@dataclass(frozen=True)
class Masks:
    """The padding and segment masks of one attention call.

    Shapes:
        key_padding_mask ``[batch, k_len]`` bool (True = a real token) or None;
        q_segments ``[batch, q_len]`` and k_segments ``[batch, k_len]`` integers, or None.
    """

    key_padding_mask: torch.Tensor | None = None
    q_segments: torch.Tensor | None = None
    k_segments: torch.Tensor | None = None

    @classmethod
    def build(
        cls,
        key_padding_mask: torch.Tensor | None,
        segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None,
        batch: int,
        q_len: int,
        k_len: int,
        device: torch.device | None = None,
    ) -> Masks | None:
        """Validate the arguments of :func:`posenc.attention` (None when both are None).

        ``segment_ids`` is ``[batch, seq]`` when queries and keys are the same tokens, or
        a pair ``(q_segment_ids, k_segment_ids)`` (a KV cache: the keys include the cached
        tokens); a single tensor with ``q_len != k_len`` is refused rather than guessed.
        """
        if key_padding_mask is None and segment_ids is None:
            return None
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
        return cls(key_padding_mask, q_ids, k_ids)

    def dense(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        causal: bool,
        pattern: AttnPattern = FULL,
    ) -> torch.Tensor:
        """True where a query may see a key: the causal mask and the pattern (window or
        chunk, :mod:`~posenc.attn.pattern`) by positions, padding and segments together.

        Shapes:
            positions ``[len]`` or ``[batch, len]`` -> bool, broadcastable to
            ``[batch, 1, q_len, k_len]`` (``[batch, 1, 1, k_len]`` for padding alone,
            without the causal mask).
        """
        allowed = pattern_mask(pattern, q_positions, k_positions, causal)  # [(b, 1,) q, k]
        if self.key_padding_mask is not None:
            real = self.key_padding_mask[:, None, None, :]  # [b, 1, 1, k]
            allowed = real if allowed is None else allowed & real
        if self.q_segments is not None and self.k_segments is not None:  # set together
            same = self.q_segments[:, None, :, None] == self.k_segments[:, None, None, :]
            allowed = same if allowed is None else allowed & same  # [b, 1, q, k]
        assert allowed is not None, "build() makes Masks only with a mask in it"
        return allowed

    def mask_mod(
        self,
        q_positions: torch.Tensor | None,
        k_positions: torch.Tensor | None,
        q_offset: int,
        causal: bool,
        pattern: AttnPattern = FULL,
    ):
        """The same mask as :meth:`dense` as a flex-attention ``mask_mod``; positions None
        are the default layout (``q_idx + q_offset`` and ``kv_idx``)."""
        kpm, q_ids, k_ids = self.key_padding_mask, self.q_segments, self.k_segments

        def mask_mod(b, h, q_idx, kv_idx):
            k_pos = position_at(k_positions, b, kv_idx)
            allowed = pattern.visible(position_at(q_positions, b, q_idx, q_offset), k_pos, causal)
            if kpm is not None:
                real = kpm[b, kv_idx]
                allowed = real if allowed is None else allowed & real
            if q_ids is not None:
                same = q_ids[b, q_idx] == k_ids[b, kv_idx]
                allowed = same if allowed is None else allowed & same
            return allowed

        return mask_mod


def open_dead_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Let query rows that may see no key see every key, and say which they were.

    A row with no key (a pad query, or a query before every key) has no softmax: kernels
    give NaN or zeros depending on the version and the device. Opened, it gives finite
    values, which the caller replaces by zeros (:func:`zero_dead_rows`); its gradient is
    then exactly zero, never NaN. No value is read (no device sync, fine on meta).

    Shapes:
        allowed ``[..., q_len | 1, k_len]`` -> (the same, dead ``[..., q_len | 1, 1]``).
    """
    dead = ~allowed.any(dim=-1, keepdim=True)
    return allowed | dead, dead


def zero_dead_rows(out: torch.Tensor, dead: torch.Tensor | None) -> torch.Tensor:
    """Zeros in the output rows of queries that see no key (see :func:`open_dead_rows`).

    Shapes:
        out ``[batch, heads, q_len, d]``; dead ``[batch | 1, 1, q_len, 1]`` or None.
    """
    return out if dead is None else out.masked_fill(dead, 0.0)


def _check_size(
    name: str, t: torch.Tensor, batch: int, length: int, of: str, device: torch.device | None
) -> None:
    if tuple(t.shape) != (batch, length):
        raise ValueError(
            f"{name} must be [batch, {of}_len] = [{batch}, {length}], got {tuple(t.shape)}"
        )
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but {of} is on {device}: move {name} there")
