"""The Triton RoPE entries as a user calls them: :mod:`posenc.functional.rope_triton`'s
entries, and before them the checks of the values only a host read sees.

The kernel's entries in :mod:`posenc.functional.rope_triton` are pure math: they check
shapes, dtypes and devices, read no value, and the kernel writes nothing outside its
tensors whatever the values. Offsets and slots that come from a user are read here, once
each, through :mod:`posenc.host_reads` (none with ``posenc.validation(False)``, under
``torch.compile`` or inside a model's checked layers):

- :func:`varlen_positions` and :func:`rope_triton` with ``cu_seqlens``: the offsets run
  ``0 = c_0 <= c_1 <= ... <= c_n = total`` (one read: the first, the last and the
  smallest step);
- :func:`rope_cache_write`: every slot is a row of the caches, read before anything is
  written, so a refused call leaves the caches as they were.

A caller that makes these values itself (:class:`~posenc.StaticKVCache` its slots) calls
the kernel's entry and reads nothing.

Example:
    >>> import torch
    >>> from posenc.rotary.triton_checks import check_cu_seqlens_values
    >>> check_cu_seqlens_values(torch.tensor([0, 3, 5]), 5)
    >>> check_cu_seqlens_values(torch.tensor([0, 3, 4]), 5)
    Traceback (most recent call last):
    ...
    ValueError: cu_seqlens must run 0 = c_0 <= c_1 <= ... <= c_n = total = 5, got c_0 = 0, c_n = 4
"""

from __future__ import annotations

from functools import partial

import torch

from ..arguments import check_int
from ..functional import rope_triton as kernel
from ..functional.rope_triton_checks import check_cu_seqlens, check_heads
from ..host_reads import read, read_now, reads_values

__all__ = [
    "check_cu_seqlens_values",
    "check_slot_values",
    "rope_cache_write",
    "rope_triton",
    "varlen_positions",
]


def check_cu_seqlens_values(cu_seqlens: torch.Tensor, total: int) -> None:
    """Raise ``ValueError`` unless ``cu_seqlens`` (``[n + 1]`` integers, checked) runs
    ``0 = c_0 <= ... <= c_n = total``: one host read of the first, the last and the
    smallest step (:mod:`posenc.host_reads`; none with value checks off).

    Shapes:
        cu_seqlens ``[n + 1]``, ``n >= 1``
    """
    check_int("total", total, minimum=0)
    cu = check_cu_seqlens(cu_seqlens)
    if reads_values(cu):
        ends = cu[[0, -1]].long()
        read(torch.cat([ends, cu.long().diff().min()[None]]), partial(_check_ends, total))


def _check_ends(total: int, values: list[int]) -> None:
    first, last, step = values
    if first != 0 or step < 0 or last != total:
        raise ValueError(
            f"cu_seqlens must run 0 = c_0 <= c_1 <= ... <= c_n = total = {total}, got "
            f"c_0 = {first}, c_n = {last}" + (", decreasing" if step < 0 else "")
        )


def check_slot_values(slots: torch.Tensor, rows: int) -> None:
    """Raise ``ValueError`` unless every slot is in ``[0, rows)``: one host read, at once
    (also inside :func:`posenc.host_reads.batched`: the write that follows must not run).

    Shapes:
        slots ``[seq]`` integers
    """
    check_int("rows", rows, minimum=0)
    if slots.numel() and reads_values(slots):
        read_now(torch.stack(torch.aminmax(slots.long())), partial(_check_rows, rows))


def _check_rows(rows: int, values: list[int]) -> None:
    low, high = values
    if low < 0 or high >= rows:
        raise ValueError(
            f"slots must be rows of k_cache and v_cache, in [0, {rows - 1}], got values in "
            f"[{low}, {high}]"
        )


def varlen_positions(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """:func:`posenc.functional.rope_triton.varlen_positions` after
    :func:`check_cu_seqlens_values`.

    Shapes:
        cu_seqlens ``[n + 1]`` integers, ``0 = c_0 <= ... <= c_n = total`` -> ``[total]``
        int64.

    Example:
        >>> varlen_positions(torch.tensor([0, 3, 5]), 5).tolist()
        [0, 1, 2, 0, 1]
    """
    check_cu_seqlens_values(cu_seqlens, total)
    return kernel.varlen_positions(cu_seqlens, total)


def rope_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor | None,
    inv_freq: torch.Tensor,
    attention_factor: float = 1.0,
    layout: str = "half",
    inplace: bool = False,
    *,
    rotary_offset: int = 0,
    inverse: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`posenc.functional.rope_triton.rope_triton`, with ``cu_seqlens``'s values
    checked first (:func:`check_cu_seqlens_values`; nothing is rotated, in place or not,
    when they are refused).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]``; with ``cu_seqlens`` ``[n + 1]``: q
        ``[total, heads, head_dim]``, k ``[total, kv_heads, head_dim]``, positions None ->
        ``(q, k)`` rotated, in their shapes and dtypes.
    """
    if cu_seqlens is not None:
        check_heads(q, k, packed=True)
        check_cu_seqlens_values(cu_seqlens, q.shape[0])
    return kernel.rope_triton(
        q, k, positions, inv_freq, attention_factor, layout, inplace,
        rotary_offset=rotary_offset, inverse=inverse, cu_seqlens=cu_seqlens,
    )  # fmt: skip


def rope_cache_write(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    layout: str = "half",
) -> torch.Tensor:
    """:func:`posenc.functional.rope_triton.rope_cache_write`, with every slot checked to
    be a row of the caches first (:func:`check_slot_values`, after the shapes): a refused
    call writes nothing.

    Shapes:
        q ``[batch, heads, seq, head_dim]``; k, v ``[batch, kv_heads, seq, head_dim]``;
        cos, sin ``[seq, n]`` or ``[batch, seq, n]``; k_cache, v_cache ``[batch, kv_heads,
        max_seq_len, head_dim]``; slots ``[seq]`` integers in ``[0, max_seq_len)`` ->
        ``[batch, heads, seq, head_dim]``.
    """
    kernel.check_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots, layout)
    check_slot_values(slots, k_cache.shape[2])
    return kernel.rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots, layout)
