"""The distance bins of Shaw's attention a block of queries at a time: which keys of a
block share the first or last bin of ``clip(j - i, -k, k)`` and which fall in the band
between (:func:`bin_blocks`), a per-bin tensor spread over the keys (:func:`spread`) and a
per-key one summed into bins (:func:`bin_sum`). :mod:`~posenc.attn.shaw_grad` runs
Shaw et al. 2018 (arXiv:1803.02155) forward and backward on them.
"""

from __future__ import annotations

import torch

from ..functional.shaw import shaw_index

__all__ = ["bin_blocks", "bin_sum", "block_bounds", "consecutive_shift", "spread"]


def consecutive_shift(q_positions: torch.Tensor, k_positions: torch.Tensor) -> int | None:
    """``c`` when the positions are consecutive, ``[len]`` each (``p = offset + index``),
    so that a pair's distance is ``j - i + c``; else None. Reads them (not under compile)."""
    if q_positions.dim() != 1 or k_positions.dim() != 1:
        return None
    for pos in (q_positions, k_positions):
        if pos.shape[0] > 1 and not bool((pos.diff() == 1).all()):
            return None
    if not q_positions.numel() or not k_positions.numel():
        return None
    return int(k_positions[0]) - int(q_positions[0])


def block_bounds(shift, q_len, k_len, max_distance, causal, block):
    """Yield ``(i0, i1, n, lo, hi)`` per block of queries ``[i0, i1)``: the keys it sees are
    ``[0, n)``; keys before ``lo`` are in the first distance bin (farther left than
    ``max_distance``), keys from ``hi`` on in the last. With consecutive positions
    (``shift`` not None: key ``j`` of query ``i`` is at distance ``j - i + shift``) the
    band ``[lo, hi)`` is the ``blk + 2k`` keys around the diagonal; otherwise every key.
    Causal, the band holds every key from ``i0`` on (to ``n``), so the keys outside it are
    visible to every query of the block: the mask is applied in the band only."""
    for i0 in range(0, q_len, block):
        i1 = min(i0 + block, q_len)
        n = i1 if causal else k_len
        lo, hi = 0, n
        if shift is not None and causal:  # the keys the mask hides stay in the band
            lo = min(max(i0 - shift - max_distance, 0), i0)
        elif shift is not None:
            lo = min(max(i0 - shift - max_distance, 0), n)
            hi = min(max(i1 - shift + max_distance, lo), n)
        yield i0, i1, n, lo, hi


def bin_blocks(qp, kp, shift, q_len, max_distance, causal, block, b, h):
    """Yield ``(i0, i1, n, band)`` per block of :func:`block_bounds`, ``band = (lo, hi,
    idx)`` with ``idx`` the bins of keys ``[lo, hi)``, expanded to ``[b, h, i1 - i0,
    hi - lo]`` (a view)."""
    k_len = kp.shape[-1]
    for i0, i1, n, lo, hi in block_bounds(shift, q_len, k_len, max_distance, causal, block):
        rel = kp[:, :, lo:hi] - qp[:, :, i0:i1].transpose(1, 2)  # [b | 1, blk, hi - lo]
        idx = shaw_index(rel, max_distance).unsqueeze(1).expand(b, h, i1 - i0, hi - lo)
        yield i0, i1, n, (lo, hi, idx)


def spread(per_bin: torch.Tensor, band, n: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``per_bin[.., i, r_ij]`` for every key ``j < n``, added to ``out`` if given:
    ``[b·h, blk, 2k + 1]`` -> ``[b·h, blk, n]``."""
    lo, hi, idx = band
    b, h, blk, _ = idx.shape
    gathered = per_bin.view(b, h, blk, -1).gather(-1, idx).view(b * h, blk, hi - lo)
    if out is None:
        if lo == 0 and hi == n:
            return gathered
        out = per_bin.new_empty(b * h, blk, n)
        out[:, :, lo:hi] = gathered
        out[:, :, :lo], out[:, :, hi:] = per_bin[:, :, :1], per_bin[:, :, -1:]
    else:
        out[:, :, lo:hi] += gathered
        out[:, :, :lo] += per_bin[:, :, :1]
        out[:, :, hi:] += per_bin[:, :, -1:]
    return out


def bin_sum(x: torch.Tensor, band, rows: int) -> torch.Tensor:
    """``x`` summed into the distance bins of its pairs: ``[b·h, blk, n]`` ->
    ``[b·h, blk, rows]``."""
    lo, hi, idx = band
    b, h, blk, _ = idx.shape
    bins = x.new_zeros(b, h, blk, rows)
    bins.scatter_add_(-1, idx, x.view(b, h, blk, -1)[..., lo:hi])
    bins = bins.view(b * h, blk, rows)
    bins[:, :, 0] += x[:, :, :lo].sum(-1)
    bins[:, :, -1] += x[:, :, hi:].sum(-1)
    return bins
