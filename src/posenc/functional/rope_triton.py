"""RoPE as Triton kernels: q and k of every head rotated in one launch, the angles of a
block of positions computed (or loaded) once for all heads (Su et al. 2021,
arXiv:2104.09864).

One kernel, three entries:

- :func:`rope_triton` computes the angles in the kernel from the positions and the
  inverse frequencies, as :func:`~posenc.functional.rope.rope_cos_sin` does: ``position ·
  inv_freq`` in float64, reduced modulo 2π, cos and sin in float64 times the attention
  factor, rounded once to float32. No table is rounded to bfloat16, and the phase holds
  at long positions (a float32 product loses it: transformers#29496). It takes what the
  peers' kernels take: positions ``[seq]`` or ``[batch, seq]`` (left padding, cache
  offsets), packed sequences by ``cu_seqlens`` (flash-attention's varlen layout), the
  rotary channels at an offset in the head (``rotary_offset``: DeepSeek-V4 rotates the
  *last* ones) and the inverse rotation (``inverse``: the transpose, flash-attention's
  ``conjugate``, vLLM's ``inverse``).
- :func:`rope_triton_tables` turns by cos/sin tables a rotary encoding already computed
  (``[seq, n]`` or ``[batch, seq, n]``): the path of ``kernel="triton"`` encodings, for
  which M-RoPE's sections are merged into the tables first (so left-padded ids are plain
  per-row tables).
- :func:`rope_cache_write` rotates q and the new keys and writes the keys and values into
  a static cache at their slots, in the same launch (vLLM's and FlashInfer's "RoPE + KV
  append").

Each pair turns in float32 and is rounded once to the input's dtype, as
:func:`~posenc.functional.rope.apply_rope` does (then to the output's, a cache's). Pairs
are ``rotary_dim`` channels of a head from ``rotary_offset`` (``half``: ``(i, i + r/2)``;
``interleaved``: ``(2i, 2i + 1)``), the other channels are copied through. The backward
is the rotation by the opposite angle (:class:`TritonRope`), the kernel with its sign
flipped.

The kernel needs Triton; on a machine without a GPU it runs under Triton's interpreter
(``TRITON_INTERPRET=1``, set before Triton is imported), which is how the tests check it.
float64 inputs are refused (the torch path computes them in float64).

These entries check every shape, dtype and device and read no value on the host (pure:
no sync, nothing that depends on ``posenc.validation``); the kernel writes nothing outside
its tensors whatever the values. The same entries with the value checks a user's
offsets and slots need (one host read each, through :mod:`posenc.host_reads`) are in
:mod:`posenc.rotary.triton_checks`.
"""

from __future__ import annotations

import torch

from ..arguments import check_bool, check_float, check_int
from .rope_triton_checks import (
    check_cache,
    check_cu_seqlens,
    check_heads,
    check_kernel_tensor,
    check_layout,
    check_offset,
    check_runs_here,
    check_slots,
    check_tables,
    check_written,
)
from .rope_triton_launch import TritonRope, launch, triton_available

__all__ = [
    "TritonRope",
    "check_cache_write",
    "rope_cache_write",
    "rope_triton",
    "rope_triton_tables",
    "triton_available",
    "varlen_positions",
]


def varlen_positions(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Each token's position in its own sequence, for sequences packed one after another
    (flash-attention's varlen layout): ``t - cu_seqlens[i]`` for token ``t`` of sequence
    ``i``. Its values are not read: offsets that do not run ``0 = c_0 <= ... <= c_n =
    total`` give positions of no meaning, never an index outside ``cu_seqlens``
    (:func:`posenc.rotary.triton_checks.varlen_positions` reads and refuses them).

    Shapes:
        cu_seqlens ``[n + 1]`` integers, ``0 = c_0 <= ... <= c_n = total`` -> ``[total]``
        int64.

    Example:
        >>> varlen_positions(torch.tensor([0, 3, 5]), 5).tolist()
        [0, 1, 2, 0, 1]
    """
    check_int("total", total, minimum=0)
    cu = check_cu_seqlens(cu_seqlens).long()
    tokens = torch.arange(total, device=cu.device)
    which = torch.searchsorted(cu[1:], tokens, right=True)  # [total]
    return tokens - cu.gather(0, which.clamp(max=cu.numel() - 2))


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
    """q and k rotated by RoPE in one Triton launch, the angles computed in the kernel;
    differentiable.

    Args:
        q: ``[batch, heads, seq, head_dim]``; k: ``[batch, kv_heads, seq, head_dim]`` (any
            strides; the same ``seq`` and ``head_dim``). With ``cu_seqlens``, packed:
            ``[total, heads, head_dim]`` and ``[total, kv_heads, head_dim]``.
        positions: ``[seq]`` or ``[batch, seq]`` integers; None with ``cu_seqlens`` (each
            token's place in its sequence, :func:`varlen_positions`).
        inv_freq: ``[rotary_dim // 2]`` floating frequencies (a scaling's, float64 or
            float32).
        attention_factor: multiplies cos and sin (YaRN's, LongRoPE's): a number > 0.
        layout: ``"half"`` or ``"interleaved"``.
        inplace: write the result into ``q`` and ``k`` (a bool).
        rotary_offset: the first rotary channel of a head (0: the first ``rotary_dim``
            rotate; ``head_dim - rotary_dim``: the last, as DeepSeek-V4); the channels
            outside are copied through.
        inverse: rotate by the opposite angles (undo a rotation; a bool).
        cu_seqlens: ``[n + 1]`` integers: packed sequences, positions restarting at each
            (its shape checked, its values not read: :func:`varlen_positions`).

    Returns:
        ``(q, k)`` rotated, in their dtypes and shapes.
    """
    check_layout(layout)
    check_bool("inplace", inplace)
    check_bool("inverse", inverse)
    check_float("attention_factor", attention_factor)
    if cu_seqlens is not None:
        if positions is not None:
            raise ValueError("pass positions or cu_seqlens, not both")
        check_heads(q, k, packed=True)
        check_runs_here(q, "q", "rope_triton")
        cu_seqlens = check_kernel_tensor("cu_seqlens", cu_seqlens, "int", (1,))
        packed = varlen_positions(cu_seqlens.to(q.device), q.shape[0])
        q4, k4 = q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0)  # [1, h, t, d]
        out = rope_triton(
            q4, k4, packed, inv_freq, attention_factor, layout, inplace,
            rotary_offset=rotary_offset, inverse=inverse,
        )  # fmt: skip
        return out[0][0].transpose(0, 1), out[1][0].transpose(0, 1)
    check_heads(q, k)
    check_runs_here(q, "q", "rope_triton")
    if positions is None:
        raise ValueError("positions must be given (or cu_seqlens)")
    positions = _check_positions(positions, q)
    freq = check_kernel_tensor("inv_freq", inv_freq, "float", (1,))  # [rotary_dim // 2]
    check_offset(rotary_offset, 2 * freq.shape[0], q.shape[-1], "inv_freq")
    if inplace:
        check_written("q", q)
        check_written("k", k)
    freq = freq.to(device=q.device, dtype=torch.float64).contiguous()
    source = (positions.to(q.device), freq)
    sign = -1.0 if inverse else 1.0
    out = TritonRope.apply(
        q, k, source, layout, sign, float(attention_factor), rotary_offset, inplace
    )
    return out[0], out[1]


def _check_positions(positions: object, q: torch.Tensor) -> torch.Tensor:
    """``positions`` as ``[seq]`` or ``[batch, seq]`` integers for ``q``, or raise."""
    positions = check_kernel_tensor("positions", positions, "int")
    batch, seq = q.shape[0], q.shape[2]
    rows_ok = positions.dim() == 1 or (positions.dim() == 2 and positions.shape[0] in (1, batch))
    if not rows_ok or positions.shape[-1] != seq:
        raise ValueError(
            f"positions must be integer [seq] or [batch, seq] with seq = {seq} and "
            f"batch = {batch} (or 1), got shape {tuple(positions.shape)}"
        )
    return positions[0] if positions.dim() == 2 and positions.shape[0] == 1 else positions


def rope_triton_tables(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "half",
    inplace: bool = False,
    *,
    rotary_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q (and k) turned by a rotary encoding's tables in one Triton launch; differentiable
    in q and k. Equal to :func:`~posenc.functional.rope.apply_rope` of each (the same
    float32 operations; a fused multiply-add may round one ulp apart).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]`` or
        None; cos, sin ``[seq, n]`` or ``[batch, seq, n]`` float32 (or ``[batch or 1, 1,
        seq, n]``), ``2n <= head_dim`` -> ``(q, k)`` rotated (k None when not given); the
        rotary channels from ``rotary_offset`` (as :func:`rope_triton`).
    """
    check_layout(layout)
    check_bool("inplace", inplace)
    check_heads(q, k, k_optional=True)
    check_runs_here(q, "q", "rope_triton_tables")
    cos, sin = check_tables(cos, sin, q)
    check_offset(rotary_offset, 2 * cos.shape[-1], q.shape[-1], "cos and sin")
    if inplace:
        check_written("q", q)
        if k is not None:
            check_written("k", k)
    out = TritonRope.apply(q, k, (cos, sin), layout, 1.0, 1.0, rotary_offset, inplace)
    return out[0], out[1]


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
    """Rotate ``q`` and the new keys ``k``, and write the rotated keys and the values
    ``v`` into rows ``slots`` of ``k_cache`` and ``v_cache``, in one Triton launch (for
    decoding; no gradient). Returns the rotated q; the caches are written in place, in
    their dtype (a key rounded to its own dtype first, as the unfused path does).

    More new tokens than the caches have rows is refused (a shape fact). The slots' values
    are not read: the kernel writes no slot outside ``[0, max_seq_len)`` (never outside
    the caches) and the other tokens land as asked. A caller that makes its own slots
    (:class:`~posenc.StaticKVCache`) knows them in range;
    :func:`posenc.rotary.triton_checks.rope_cache_write` refuses a user's by one read,
    before anything is written.

    Shapes:
        q ``[batch, heads, seq, head_dim]``; k, v ``[batch, kv_heads, seq, head_dim]``;
        cos, sin as :func:`rope_triton_tables`; k_cache, v_cache ``[batch, kv_heads,
        max_seq_len, head_dim]`` float32, bfloat16 or float16; slots ``[seq]`` integers
        (the same rows for the batch, as :class:`~posenc.StaticKVCache` writes them) ->
        ``[batch, heads, seq, head_dim]``.
    """
    cos, sin = check_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots, layout)
    with torch.no_grad():
        q_out, _ = launch(
            q, k, (cos, sin), layout, 1.0, cache=(v, k_cache, v_cache, slots.to(q.device))
        )
    return q_out


def check_cache_write(
    q: object,
    k: object,
    v: object,
    cos: object,
    sin: object,
    k_cache: object,
    v_cache: object,
    slots: object,
    layout: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The checks of :func:`rope_cache_write`'s arguments (shapes, dtypes, devices; no
    value read): raise a ``TypeError`` or ``ValueError`` naming the first bad one, or
    return ``cos`` and ``sin`` as the kernel reads them (``[batch or 1, seq, n]``)."""
    check_layout(layout)
    check_heads(q, k)
    check_heads(v, k, names=("v", "k"))
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)  # checked above
    assert isinstance(v, torch.Tensor)
    check_runs_here(q, "q", "rope_cache_write")
    k_cache = check_cache("k_cache", k_cache, k, q)
    v_cache = check_cache("v_cache", v_cache, v, q)
    cos, sin = check_tables(cos, sin, q)
    check_offset(0, 2 * cos.shape[-1], q.shape[-1], "cos and sin")
    check_slots(slots, q.shape[2], k_cache, v_cache)
    return cos, sin
