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
"""

from __future__ import annotations

import math

import torch

from .rope_triton_launch import DTYPES, TritonRope, launch, triton_available

__all__ = [
    "TritonRope",
    "rope_cache_write",
    "rope_triton",
    "rope_triton_tables",
    "triton_available",
    "varlen_positions",
]


def _check_heads(q: torch.Tensor, k: torch.Tensor | None) -> None:
    """Raise unless q (and k) are ``[batch, heads, seq, head_dim]`` of a dtype the kernel
    turns, with the same batch, seq, head_dim and device."""
    for name, t in (("q", q), ("k", k)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a [batch, heads, seq, head_dim] tensor, got {t!r}")
        if t.dtype not in DTYPES:
            raise TypeError(
                f"{name} must be float32, bfloat16 or float16 for the Triton kernel (float64 "
                f"stays on the torch path), got {t.dtype}"
            )
    if k is not None and (q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]):
        raise ValueError(
            "q and k must be [batch, heads, seq, head_dim] with the same batch, seq and "
            f"head_dim, got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if k is not None and k.device != q.device:
        raise ValueError(f"q and k must be on one device, got {q.device} and {k.device}")


def _check_layout(layout: str) -> None:
    if not triton_available():
        raise RuntimeError("the Triton RoPE kernel needs Triton (pip install triton)")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def varlen_positions(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Each token's position in its own sequence, for sequences packed one after another
    (flash-attention's varlen layout): ``t - cu_seqlens[i]`` for token ``t`` of sequence
    ``i``. No host read.

    Shapes:
        cu_seqlens ``[n + 1]`` integers, ``0 = c_0 <= ... <= c_n = total`` -> ``[total]``
        int64.

    Example:
        >>> varlen_positions(torch.tensor([0, 3, 5]), 5).tolist()
        [0, 1, 2, 0, 1]
    """
    if (
        not isinstance(cu_seqlens, torch.Tensor)
        or cu_seqlens.dim() != 1
        or cu_seqlens.is_floating_point()
        or cu_seqlens.numel() < 2
    ):
        raise ValueError(
            f"cu_seqlens must be [n + 1] integers (0, the ends of the n sequences), got "
            f"{cu_seqlens!r}"
        )
    tokens = torch.arange(total, device=cu_seqlens.device)
    which = torch.searchsorted(cu_seqlens[1:].long(), tokens, right=True)  # [total]
    return tokens - cu_seqlens.long().gather(0, which.clamp(max=cu_seqlens.numel() - 2))


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
        inv_freq: ``[rotary_dim // 2]`` frequencies (a scaling's, float64 or float32).
        attention_factor: multiplies cos and sin (YaRN's, LongRoPE's).
        layout: ``"half"`` or ``"interleaved"``.
        inplace: write the result into ``q`` and ``k``.
        rotary_offset: the first rotary channel of a head (0: the first ``rotary_dim``
            rotate; ``head_dim - rotary_dim``: the last, as DeepSeek-V4); the channels
            outside are copied through.
        inverse: rotate by the opposite angles (undo a rotation).
        cu_seqlens: ``[n + 1]`` integers: packed sequences, positions restarting at each.

    Returns:
        ``(q, k)`` rotated, in their dtypes and shapes.
    """
    _check_layout(layout)
    if cu_seqlens is not None:
        if positions is not None:
            raise ValueError("pass positions or cu_seqlens, not both")
        if q.dim() != 3 or k.dim() != 3:
            raise ValueError(
                "with cu_seqlens, q and k must be packed [total, heads, head_dim], got "
                f"{tuple(q.shape)} and {tuple(k.shape)}"
            )
        packed = varlen_positions(cu_seqlens.to(q.device), q.shape[0])
        q4, k4 = q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0)
        out = rope_triton(
            q4, k4, packed, inv_freq, attention_factor, layout, inplace,
            rotary_offset=rotary_offset, inverse=inverse,
        )  # fmt: skip
        return out[0][0].transpose(0, 1), out[1][0].transpose(0, 1)
    _check_heads(q, k)
    if positions is None:
        raise ValueError("positions must be given (or cu_seqlens)")
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.dim() != 1:
        raise ValueError(f"inv_freq must be [rotary_dim // 2], got {inv_freq!r}")
    _check_offset(rotary_offset, 2 * inv_freq.shape[0], q.shape[-1], "inv_freq")
    rows_ok = positions.dim() == 1 or (
        positions.dim() == 2 and positions.shape[0] in (1, q.shape[0])
    )
    if positions.is_floating_point() or positions.shape[-1] != q.shape[2] or not rows_ok:
        raise ValueError(
            f"positions must be integer [seq] or [batch, seq] with seq = {q.shape[2]} and "
            f"batch = {q.shape[0]} (or 1), got {positions.dtype} {tuple(positions.shape)}"
        )
    if not math.isfinite(attention_factor):
        raise ValueError(f"attention_factor must be finite, got {attention_factor}")
    freq = inv_freq.to(device=q.device, dtype=torch.float64).contiguous()
    if positions.dim() == 2 and positions.shape[0] == 1:
        positions = positions[0]
    source = (positions.to(q.device), freq)
    sign = -1.0 if inverse else 1.0
    out = TritonRope.apply(
        q, k, source, layout, sign, float(attention_factor), rotary_offset, inplace
    )
    return out[0], out[1]


def _check_offset(offset: int, rotary_dim: int, head_dim: int, source: str) -> None:
    if rotary_dim > head_dim:
        raise ValueError(
            f"{source} must turn rotary_dim <= head_dim ({head_dim}) channels, got "
            f"rotary_dim {rotary_dim}"
        )
    if (
        isinstance(offset, bool)
        or not isinstance(offset, int)
        or not 0 <= offset <= head_dim - rotary_dim
    ):
        raise ValueError(
            f"rotary_offset must be an int in [0, head_dim - rotary_dim = "
            f"{head_dim - rotary_dim}], got {offset!r}"
        )


def _tables(cos: torch.Tensor, sin: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``cos`` and ``sin`` as ``[batch or 1, seq, n]`` for ``x`` ``[batch, heads, seq, d]``
    (from ``[seq, n]``, ``[batch, seq, n]`` or ``[batch or 1, 1, seq, n]``), or raise."""
    if cos.dim() == 4 and cos.shape[1] == 1:
        cos, sin = cos[:, 0], sin[:, 0]
    elif cos.dim() == 2:
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    batch, _, seq, head_dim = x.shape
    if (
        cos.dim() != 3
        or cos.shape != sin.shape
        or cos.shape[0] not in (1, batch)
        or cos.shape[1] != seq
        or 2 * cos.shape[2] > head_dim
        or cos.dtype != torch.float32
        or sin.dtype != torch.float32
    ):
        raise ValueError(
            "cos and sin must be float32 [seq, n] or [batch, seq, n] (one rotation for every "
            f"head) with seq = {seq}, batch = {batch} (or 1) and 2n <= {head_dim}, got "
            f"{cos.dtype} {tuple(cos.shape)} and {sin.dtype} {tuple(sin.shape)}"
        )
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("cos and sin must not need a gradient: the kernel gives none to them")
    return cos.to(x.device), sin.to(x.device)


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
    _check_layout(layout)
    _check_heads(q, k)
    cos, sin = _tables(cos, sin, q)
    _check_offset(rotary_offset, 2 * cos.shape[-1], q.shape[-1], "cos and sin")
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

    Shapes:
        q ``[batch, heads, seq, head_dim]``; k, v ``[batch, kv_heads, seq, head_dim]``;
        cos, sin as :func:`rope_triton_tables`; k_cache, v_cache ``[batch, kv_heads,
        max_seq_len, head_dim]``; slots ``[seq]`` integers (the same rows for the batch,
        as :class:`~posenc.StaticKVCache` writes them) -> ``[batch, heads, seq, head_dim]``.
    """
    _check_layout(layout)
    _check_heads(q, k)
    _check_heads(v, k)
    for name, c, new in (("k_cache", k_cache, k), ("v_cache", v_cache, v)):
        if (
            not isinstance(c, torch.Tensor)
            or c.dim() != 4
            or (c.shape[0], c.shape[1], c.shape[3]) != (new.shape[0], new.shape[1], new.shape[3])
            or c.device != q.device
        ):
            raise ValueError(
                f"{name} must be [batch={new.shape[0]}, kv_heads={new.shape[1]}, max_seq_len, "
                f"{new.shape[3]}] on {q.device}, got {c!r}"
            )
    if slots.dim() != 1 or slots.is_floating_point() or slots.shape[0] != q.shape[2]:
        raise ValueError(
            f"slots must be [seq = {q.shape[2]}] integers, got {slots.dtype} {tuple(slots.shape)}"
        )
    cos, sin = _tables(cos, sin, q)
    with torch.no_grad():
        q_out, _ = launch(
            q, k, (cos, sin), layout, 1.0, cache=(v, k_cache, v_cache, slots.to(q.device))
        )
    return q_out
