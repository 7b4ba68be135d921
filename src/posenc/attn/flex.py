"""Flex attention for bias encodings: compiled once, block masks cached per shape.

``torch.nn.attention.flex_attention`` fuses a ``score_mod`` into the attention kernel, so a
bias encoding adds its term score by score and no ``[heads, L, L]`` tensor exists. The
compiled kernel is built once per process (``dynamic=False``: one graph per shape class),
and causal block masks for the default positions are cached per (q_len, k_len, device).
"""

from __future__ import annotations

import functools

import torch

from ..functional.compiled import many_graphs
from ..functional.cpu import cpu_vector_isa
from ..positions import query_offset
from .pattern import FULL, AttnPattern

__all__ = ["flex_attention", "flex_available", "flex_block_mask"]

#: smaller CPU heads are zero-padded to this size (see :func:`flex_attention`)
CPU_MIN_HEAD_DIM = 24


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


@functools.lru_cache(maxsize=32)
def _default_mask(q_len: int, k_len: int, device: torch.device, causal: bool, pattern: AttnPattern):
    """The block mask of the default positions (queries are the last ``q_len`` keys),
    cached per shape and pattern."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = query_offset(q_len, k_len)

    def by_index(b, h, q_idx, kv_idx):
        return pattern.visible(q_idx + offset, kv_idx, causal)

    return create_block_mask(by_index, None, None, q_len, k_len, device=device)


def _positions_mask(
    q_positions: torch.Tensor, k_positions: torch.Tensor, causal: bool, pattern: AttnPattern
):
    """The block mask of explicit positions (``[len]`` or ``[batch, len]``)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if q_positions.dim() == 1 and k_positions.dim() == 1:

        def shared(b, h, q_idx, kv_idx):
            return pattern.visible(q_positions[q_idx], k_positions[kv_idx], causal)

        q_len, k_len = len(q_positions), len(k_positions)
        return create_block_mask(shared, None, None, q_len, k_len, device=q_positions.device)

    batch = max(p.shape[0] for p in (q_positions, k_positions) if p.dim() == 2)
    q2, k2 = q_positions.expand(batch, -1), k_positions.expand(batch, -1)  # [b, len]

    def batched(b, h, q_idx, kv_idx):
        return pattern.visible(q2[b, q_idx], k2[b, kv_idx], causal)

    return create_block_mask(batched, batch, None, q2.shape[1], k2.shape[1], device=q2.device)


def flex_block_mask(
    batch: int,
    q_len: int,
    k_len: int,
    device: torch.device,
    q_positions: torch.Tensor | None,
    k_positions: torch.Tensor | None,
    causal: bool,
    mask_mod=None,
    pattern: AttnPattern = FULL,
):
    """The block mask of a flex call: ``mask_mod``'s (padding and documents, the causal
    part and the pattern included), else the causal mask and the pattern (window, chunk)
    of the positions (of the default positions, None: cached per shape), else None
    (nothing masked). Blocks the window or chunk hides are skipped: a sliding window costs
    ``O(L·W)``, not ``O(L²)``."""
    if mask_mod is not None:
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(mask_mod, batch, None, q_len, k_len, device=device)
    if not causal and not pattern.local:
        return None
    if q_positions is None or k_positions is None:  # given together, or neither
        return _default_mask(q_len, k_len, device, causal, pattern)
    return _positions_mask(q_positions, k_positions, causal, pattern)


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
        block_mask = flex_block_mask(*shape, q.device, q_positions, k_positions, causal, mask_mod)
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
        )


def capped(score_mod, softcap: float):
    """``score_mod`` followed by Gemma 2's soft cap, ``softcap * tanh(s / softcap)``
    (None: the cap alone)."""

    def mod(score, b, h, q_idx, kv_idx):
        if score_mod is not None:
            score = score_mod(score, b, h, q_idx, kv_idx)
        return softcap * torch.tanh(score / softcap)

    return mod
