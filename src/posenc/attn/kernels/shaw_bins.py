"""The distance bins of Shaw's attention a block of queries at a time: which keys of a
block share the first or last bin of ``clip(j - i, -k, k)`` and which fall in the band
between (:func:`bin_blocks`), a per-bin tensor spread over the keys (:func:`spread`) and a
per-key one summed into bins (:func:`bin_sum`). :mod:`~posenc.attn.runners.shaw` runs
Shaw et al. 2018 (arXiv:1803.02155) forward and backward on them.
"""

from __future__ import annotations

import torch

from ...functional.shaw import shaw_index

__all__ = ["band_masks", "bin_blocks", "bin_sum", "block_bounds", "consecutive_shift", "spread"]


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


def band_masks(bins, blocks, shift, max_distance, causal):
    """Yield each block's additive mask over its band, ``[b, h, i1 - i0, hi - lo]``, for
    consecutive positions (``shift`` an int; the blocks of :func:`block_bounds`): the bias of
    key ``j`` is ``bins[.., i, clip(j - i + shift, -k, k) + k]``, ``-inf`` past the query
    under the causal mask.

    A key's bias depends on its query's row of ``bins`` and on ``j - i`` alone, so every
    block reads one buffer laid out by distance, ``buf[r, t]`` for ``j - i = t + rel_min``,
    through a view whose rows step one column left (row stride ``T - 1``, the skew of
    Huang et al. 2018, arXiv:1809.04281, section 3.4.1). The columns before the first bin,
    and the masked ones, are the same for every block and are written once; a block writes
    its rows' ``2k + 1`` bins (and, not causal, the last one past them). The views share the
    buffer: use each before taking the next.

    Shapes:
        bins ``[b, h, q_len, 2k + 1]``, each bin's bias over the first (``bins[.., 0] = 0``).
    """
    rel_min = min(lo - i1 + 1 for i0, i1, _, lo, _ in blocks)
    width = max(max(hi - i0 for i0, _, _, _, hi in blocks) - rel_min, 1)  # T (no band: 0)
    b, h, _, rows = bins.shape
    buf = bins.new_empty(b, h, max(i1 - i0 for i0, i1, *_ in blocks), width)
    first = min(max(-max_distance - shift - rel_min, 0), width)  # column of bin 0's end
    # the columns a block writes: its bins from ``first``, up to the query (causal) or on
    end = min(1 - rel_min, width) if causal else width
    top = min(max(first, -max_distance - shift - rel_min + rows), end)  # past the last bin
    if first > 0:
        buf[..., :first] = 0.0
    if end < width:
        buf[..., end:] = float("-inf")
    skip = first + max_distance + shift + rel_min  # bins before column ``first``
    for i0, i1, _, lo, hi in blocks:
        blk = i1 - i0
        if top > first:
            buf[:, :, :blk, first:top] = bins[:, :, i0:i1, skip : skip + top - first]
        if end > top:
            buf[:, :, :blk, top:end] = bins[:, :, i0:i1, -1:]
        stride = (buf.stride(0), buf.stride(1), width - 1, 1)
        offset = buf.storage_offset() + lo - i0 - rel_min
        yield buf.as_strided((b, h, blk, hi - lo), stride, offset)


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
