"""The rotary kind: an encoding that rotates queries and keys inside every attention layer."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from ..arguments import check_device, check_size, check_tensor
from ..config import MAX_POSITION, EncodingConfig, check_int
from ..host_reads import checked
from ..positions import query_offset
from .encoding import Encoding, check_float_tensor

__all__ = ["RotaryConfig", "RotaryEncoding"]


@dataclasses.dataclass(frozen=True)
class RotaryConfig(EncodingConfig):
    """Base of the configs of rotary encodings: ``head_dim``, the size of each attention
    head, is their first key (each config checks it in its ``__post_init__``)."""

    head_dim: int


class RotaryEncoding(Encoding):
    """An encoding that rotates queries and keys inside attention.

    Subclasses implement :meth:`rotation` (the per-position tables, computed once per
    forward and shared by every layer) and :meth:`rotate` (rotate one tensor with them).

    Shapes:
        q: ``[batch, heads, seq, head_dim]``; k: ``[batch, kv_heads, k_seq, head_dim]``;
        positions: ``[seq]`` or ``[batch, seq]``.
    """

    kind = "rotary"
    size_key = "head_dim"
    config: RotaryConfig
    #: how many times wider :meth:`rotate` makes q and k (PoPE: 2, a complex number per
    #: channel); attention keeps the score scale of the input width, ``1/sqrt(head_dim)``
    width_factor: ClassVar[int] = 1
    #: whether attention must turn the queries itself, per region of keys (``dca``): then
    #: :func:`posenc.attention` takes q and k unrotated and runs its own softmax
    merges_attention: ClassVar[bool] = False

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    @property
    def depends_on_length(self) -> bool:
        """Whether the rotation depends on the current total length (``seq_len``)."""
        return False

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The tables that rotate tokens at ``positions`` (e.g. ``(cos, sin)``).

        ``seq_len`` is the current total length, for encodings whose frequencies depend on
        it (dynamic NTK, LongRoPE); by default ``max(positions) + 1``.
        """
        raise NotImplementedError

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """Rotate ``x`` ``[batch, heads, seq, head_dim]`` (``key`` marks keys, for encodings
        that treat queries and keys differently, such as xPos) into ``[batch, heads, seq,
        width_factor · head_dim]``.

        Named ``rotate``, not ``apply``: ``nn.Module.apply(fn)`` calls ``apply(fn)`` on
        every child, so an override would break ``model.apply(init_fn)``."""
        raise NotImplementedError

    def rotate_pair(
        self, q: torch.Tensor, k: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys at the same positions rotated by one ``rotation``: ``(rotate(q),
        rotate(k, key=True))``, or one kernel for both where an encoding has it (RoPE's
        ``kernel="triton"``)."""
        check_tensor("q", q, dims=(4,))
        check_tensor("k", k, dims=(4,))
        if q.device != k.device:
            raise ValueError(f"q is on {q.device} but k on {k.device}: they share positions")
        return self.rotate(q, rotation), self.rotate(k, rotation, key=True)

    def causal_positions(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The 1-D order of ``positions`` for a causal mask (``k <= q``), or None when they
        have none (grid coordinates; M-RoPE's ``[3, batch, seq]``): attention then masks
        by the token index."""
        check_tensor("positions", positions, kinds=("int", "float"))
        return positions if self.position_axes == 1 else None

    def _check_heads(self, name: str, t: torch.Tensor) -> None:
        check_float_tensor(name, t)
        if t.dim() != 4 or t.shape[-1] != self.head_dim:
            raise ValueError(
                f"{name} must be [batch, heads, seq, head_dim] with head_dim={self.head_dim}, "
                f"got shape {tuple(t.shape)}"
            )
        self._check_device(name, t)

    def default_rotation(
        self,
        seq_len: int,
        device: torch.device | str | None = None,
        *,
        offset: int = 0,
        total_len: int | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`rotation` of the default positions ``offset .. offset + seq_len - 1``
        (:meth:`default_positions`; a grid encoding's configured grid), what :meth:`forward`
        rotates by when no positions are given. They are in range by construction, so no
        value is read to check them; RoPE serves them from tables made once per device
        (:mod:`posenc.rotary.tables`).

        ``total_len`` is the current total length for the encodings whose frequencies
        depend on it (:attr:`depends_on_length`; :meth:`rotation`'s ``seq_len``), by
        default ``offset + seq_len``.

        Shapes:
            returns :meth:`rotation`'s tables for ``[seq_len]`` positions.
        """
        check_size("seq_len", seq_len)
        check_size("offset", offset, maximum=MAX_POSITION)
        if total_len is not None:
            check_size("total_len", total_len, minimum=1, maximum=MAX_POSITION)
        return self._default_rotation(seq_len, check_device(device), offset, total_len)

    def _default_rotation(
        self, seq_len: int, device: torch.device | None, offset: int, total_len: int | None
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`default_rotation` of checked arguments (a subclass's table goes here)."""
        positions = self.default_positions(seq_len, device, offset=offset)
        if total_len is None and self.depends_on_length and seq_len:  # none: any length
            total_len = offset + seq_len
        with checked():  # made here, in range: nothing to read
            return self.rotation(positions, total_len)

    def _layer_rotation(
        self, seq_len: int, device: torch.device | None, offset: int
    ) -> tuple[torch.Tensor, ...]:
        """The rotation of the default positions ``offset .. offset + seq_len - 1`` that a
        model hands each of its layers for :meth:`_rotate_pair` (arguments checked): the
        tables of :meth:`default_rotation`, in the form the encoding turns q and k by
        fastest (RoPE: its table's widened rows)."""
        return self._default_rotation(seq_len, device, offset, None)

    def _rotate_default(
        self, q: torch.Tensor, k: torch.Tensor, offset: int, total_len: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` of checked q and k at the default positions, the queries from
        ``offset`` (RoPE turns both in one pass by its table)."""
        k_rot = self._default_rotation(k.shape[2], q.device, 0, total_len)
        if not offset:
            return self._rotate_pair(q, k, k_rot)
        q_rot = self._default_rotation(q.shape[2], q.device, offset, total_len)
        return self.rotate(q, q_rot), self.rotate(k, k_rot, key=True)

    def _rotate_pair(
        self, q: torch.Tensor, k: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`rotate_pair` of q and k that :meth:`forward` checked, by a ``rotation``
        it made for them: RoPE skips the checks; other encodings run :meth:`rotate_pair`."""
        return self.rotate_pair(q, k, rotation)

    def _rotate_heads(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> torch.Tensor | None:
        """q's and k's heads side by side in one tensor (a model's projection), checked,
        turned in one pass by a ``rotation`` made for them, where q and k turn alike and
        that pass pays (RoPE); None elsewhere: the caller turns them with
        :meth:`_rotate_pair`."""
        return None

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        seq_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries by ``positions`` and keys by ``k_positions``.

        By default the queries are the last ``q_len`` of the ``k_len`` keys
        (:func:`~posenc.positions.query_offset`), rotated by :meth:`default_rotation`
        (no value read); given ``positions`` alone serve both when the lengths agree and
        are checked once.

        Returns:
            ``(q_rotated, k_rotated)`` with the shapes and dtypes of ``q`` and ``k``, their
            last dimension ``width_factor`` times wider (PoPE's 2).
        """
        self._check_heads("q", q)
        self._check_heads("k", k)
        if q.shape[0] != k.shape[0] or q.device != k.device:
            raise ValueError(
                f"q and k must share their batch size and device, got q {tuple(q.shape)} on "
                f"{q.device} and k {tuple(k.shape)} on {k.device}"
            )
        if seq_len is not None:
            check_int("seq_len", seq_len)
        q_len, k_len = q.shape[2], k.shape[2]
        if positions is None:
            if k_positions is not None:
                raise ValueError("k_positions given without positions: pass both")
            offset = k_len - q_len
            if offset < 0:
                query_offset(q_len, k_len, given="positions")  # raises, saying what to pass
            return self._rotate_default(q, k, offset, seq_len)
        positions = self.check_positions(
            positions, seq_len=q_len, batch=q.shape[0], device=q.device
        )
        if k_positions is None:
            if k_len != q_len:
                raise ValueError(f"k has {k_len} positions and q {q_len}: pass k_positions")
            k_positions = positions
        else:
            k_positions = self.check_positions(
                k_positions, seq_len=k_len, batch=k.shape[0], name="k_positions", device=k.device
            )
        if (
            seq_len is None
            and self.depends_on_length
            and not torch.compiler.is_compiling()
            and positions.device.type != "meta"
            and positions.numel() + k_positions.numel()
        ):
            # one length for queries and keys, so length-dependent frequencies agree
            seq_len = int(torch.cat((positions.flatten(), k_positions.flatten())).max()) + 1
        with checked():  # checked above: the rotations read nothing again
            q_rot = self.rotation(positions, seq_len)
            same = k_positions is positions
            k_rot = q_rot if same else self.rotation(k_positions, seq_len)
        if same:
            return self._rotate_pair(q, k, q_rot)
        return self.rotate(q, q_rot), self.rotate(k, k_rot, key=True)
