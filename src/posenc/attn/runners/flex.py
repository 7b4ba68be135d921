"""The ``flex`` runner: compiled flex attention, with a bias encoding's ``score_mod``.

``torch.nn.attention.flex_attention`` fuses a ``score_mod`` into the attention kernel, so a
bias encoding adds its term score by score and no ``[heads, L, L]`` tensor exists; its
block mask (:func:`~posenc.attn.masks.flex_block_mask`) skips the blocks a window, a chunk,
padding or other documents hide. The compiled kernel is built once per process
(``dynamic=False``: one graph per shape class).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from ...functional.compiled import many_graphs
from ...functional.cpu import cpu_vector_isa
from ...positions import query_offset
from ..masks import FULL, flex_block_mask

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["capped", "flex", "flex_attention", "flex_available"]

#: smaller CPU heads are zero-padded to this size (see :func:`flex_attention`)
CPU_MIN_HEAD_DIM = 24


#: flex attention's tiles on CUDA for a score_mod that reads tensors (T5's table, Shaw's,
#: Kerple's and FIRE's parameters). Inductor's default for head_dim 64 in bfloat16 needs
#: 240-272 KiB of shared memory with such a score_mod and fails to compile on an H200 (227
#: KiB); these compiled there and ran T5 at 0.26 ms, Kerple at 0.22 (default: 0.78), Shaw
#: at 0.29, against 0.07 for causal SDPA ([1, 8, 4096, 64], torch 2.11; docs/gpu.md)
CUDA_TABLE_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1}


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention as flex

    return torch.compile(flex, dynamic=False)


def flex_available(device: torch.device) -> bool:
    """Whether compiled flex attention can run on ``device``: CUDA, and CPUs with a vector
    instruction set inductor builds its flex kernel for (AVX2, AVX-512; its C++ kernel does
    not compile without one, e.g. under ``ATEN_CPU_CAPABILITY=default``)."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:  # pragma: no cover - torch < 2.5
        return False
    if device.type == "cpu":
        return cpu_vector_isa()
    return device.type == "cuda"


def flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    score_mod,
    q_positions: torch.Tensor | None,
    k_positions: torch.Tensor | None,
    causal: bool,
    scale: float,
    mask_mod=None,
    block_mask=None,
    *,
    softcap: float | None = None,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """Attention with ``score_mod`` fused into compiled flex attention.

    Positions None means the default layout (queries are the last ``q_len`` of the keys);
    its causal block mask is cached. Explicit positions build their mask per call, and so
    does ``mask_mod`` (padding and packed documents, which includes the causal mask),
    unless the caller passes the ``block_mask`` it built once: the block mask then skips
    every block it hides.

    Args:
        q, k, v: the attention inputs; ``heads`` a multiple of ``kv_heads``.
        score_mod: a flex ``score_mod`` (:meth:`~posenc.base.BiasEncoding.score_mod`).
        q_positions, k_positions: ``[len]`` or ``[batch, len]``, or None (the default).
        causal: mask keys after their query (ignored with ``mask_mod``, which has it).
        scale: the score scale.
        mask_mod: a flex ``mask_mod`` (:meth:`~posenc.attn.masks.Masks.mask_mod`).
        block_mask: the block mask of these arguments (:func:`flex_block_mask`), built once
            by the caller for several calls; None: built here.
        softcap: scores become ``softcap * tanh(s / softcap)`` after ``score_mod``.
        kernel_options: flex attention's (tile sizes, stages); None: inductor's default.

    Shapes:
        q ``[batch, heads, q_len, d]``, k, v ``[batch, kv_heads, k_len, d]`` ->
        ``[batch, heads, q_len, d]``

    Returns:
        the attention output in the dtype of ``q``.
    """
    if not flex_available(q.device):
        raise RuntimeError(
            f"compiled flex attention does not run on this {q.device.type}: inductor has no "
            "vector instruction set for it (AVX2 or AVX-512); use backend='sdpa'"
        )
    if q.device.type == "cpu" and q.shape[-1] < CPU_MIN_HEAD_DIM:
        # torch's CPU kernel (inductor's micro-GEMM for q kᵀ, torch 2.13) takes 16 keys at a
        # time; with 8-float vectors (AVX2) and a head size of 8 or 16, a last block of 8
        # keys reads 8 keys past it and writes 8 scores past its buffer: wrong outputs or NaN
        # when k_len % 16 == 8. Zero columns leave q kᵀ as it is and take the kernel's other
        # branch (head size >= 24).
        pad = CPU_MIN_HEAD_DIM - q.shape[-1]
        q, k = torch.nn.functional.pad(q, (0, pad)), torch.nn.functional.pad(k, (0, pad))
    if block_mask is None:
        shape = (q.shape[0], q.shape[2], k.shape[2])
        block_mask = flex_block_mask(
            *shape, q.device, q_positions, k_positions, causal, mask_mod, FULL
        )
    if softcap is not None:
        score_mod = capped(score_mod, softcap)
    with many_graphs():  # one graph per (encoding, shape class), past dynamo's 8
        return _compiled()(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=block_mask,
            scale=scale,
            enable_gqa=q.shape[1] != k.shape[1],
            kernel_options=kernel_options,
        )


def capped(score_mod, softcap: float):
    """``score_mod`` followed by Gemma 2's soft cap, ``softcap * tanh(s / softcap)``
    (None: the cap alone)."""

    def mod(score, b, h, q_idx, kv_idx):
        if score_mod is not None:
            score = score_mod(score, b, h, q_idx, kv_idx)
        return softcap * torch.tanh(score / softcap)

    return mod


def flex(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: flex attention with the encoding's ``score_mod`` (none: plain scores),
    the context's block mask of the call's pattern and softcap (sinks never reach it);
    default positions stay None, so the ``score_mod`` reads indices.

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]`` ->
        ``[b, h, q_len, d_v]``.
    """
    p, q, k, v = call.context.positions, call.q, call.k, call.v
    qp, kp = (p.q, p.k) if p.explicit else (None, None)
    score_mod = None
    if call.encoding is not None:
        q_offset = 0 if p.explicit else query_offset(p.q_len, p.k_len)
        score_mod = call.encoding.score_mod(qp, kp, q=q, q_offset=q_offset, scale=call.scale)
    width = v.shape[-1]
    if width < q.shape[-1]:  # PoPE's wider q, k: one width for the kernel
        v = torch.nn.functional.pad(v, (0, q.shape[-1] - width))
    options = call.options
    mask = call.context.block_mask(q.shape[0], call.causal, options.pattern)
    reads_tensors = call.encoding is not None and any(True for _ in call.encoding.parameters())
    tiles = CUDA_TABLE_TILES if reads_tensors and q.is_cuda else None
    out = flex_attention(
        q,
        k,
        v,
        score_mod,
        qp,
        kp,
        call.causal,
        call.scale,
        block_mask=mask,
        softcap=options.softcap,
        kernel_options=tiles,
    )
    return out[..., :width]
