"""The position maps of Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context
Scaling of Large Language Models", arXiv:2402.17463), as Qwen2.5-1M ships it
(``dual_chunk_attention_config``) and vLLM's and SGLang's ``DualChunkRotaryEmbedding`` and
dual-chunk attention run it.

With ``chunk_size`` C and ``local_size`` w, the sequence is cut into chunks of
``s = C - w`` positions. A key at position j turns by ``j mod s`` (its place in its
chunk). A query at position i sees the keys of three regions, by how many chunks lie
between them (:func:`dca_region`), and turns by a position of its own in each:

=========  ======================  =========================  ==========================
region     keys                    query turns by             distance q − k
=========  ======================  =========================  ==========================
intra (0)  its own chunk, j <= i   ``i mod s``                ``i − j``, below ``s``
succ (1)   the chunk before        ``min(i mod s + s, C)``    ``i − j`` while ``i mod s <=
                                                              w``, then capped at C
inter (2)  every earlier chunk     ``min(2s − 1, C)``         ``C − (j mod s)``, in
                                                              ``(C − s, C]``
=========  ======================  =========================  ==========================

so no distance exceeds C, the length the model was trained at, however long the sequence.
The paper's successive-chunk and inter-chunk queries stop at ``C − 1``; the engines' at C
(these maps follow the engines). Attention is one softmax over the three regions (the
engines merge three flash-attention calls by their log-sum-exp: the same result).

Past ``original_max_position_embeddings`` L₀ the engines also temper attention as YaRN
does: q and k are each multiplied by ``max(1, 0.1 · ln(n / L₀) + 1)`` for ``n`` tokens
(:func:`dca_length_factor`), so the logits by its square.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "DCA_REGIONS",
    "dca_chunk_len",
    "dca_key_positions",
    "dca_length_factor",
    "dca_query_positions",
    "dca_region",
]

#: the regions of a query's keys, by the chunks between them
DCA_REGIONS = ("intra", "succ", "inter")


def dca_chunk_len(chunk_size: int, local_size: int) -> int:
    """The length ``s = chunk_size − local_size`` of the chunks that positions are cut
    into."""
    return chunk_size - local_size


def dca_key_positions(positions: torch.Tensor, chunk_size: int, local_size: int) -> torch.Tensor:
    """The position each key turns by: ``j mod s``. Shapes: ``[...]`` -> ``[...]``."""
    return positions % dca_chunk_len(chunk_size, local_size)


def dca_query_positions(
    positions: torch.Tensor, chunk_size: int, local_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The positions a query turns by against the keys of each region (:data:`DCA_REGIONS`):
    ``(i mod s, min(i mod s + s, C), min(2s − 1, C))``.

    Shapes:
        positions ``[...]`` (integers) -> three ``[...]`` of their dtype.
    """
    s = dca_chunk_len(chunk_size, local_size)
    intra = positions % s
    succ = (intra + s).clamp(max=chunk_size)
    inter = torch.full_like(intra, min(2 * s - 1, chunk_size))
    return intra, succ, inter


def dca_region(
    q_positions: torch.Tensor, k_positions: torch.Tensor, chunk_len: int
) -> torch.Tensor:
    """The region of every (query, key) pair: ``min(i // s − j // s, 2)`` (0 intra, 1 the
    chunk before, 2 earlier), 0 for a key in a later chunk (the causal mask hides it).

    Shapes:
        q_positions ``[q_len]`` or ``[batch, q_len]``, k_positions likewise ->
        ``[q_len, k_len]`` or ``[batch, q_len, k_len]`` (int64).
    """
    qc = torch.div(q_positions, chunk_len, rounding_mode="floor").unsqueeze(-1)
    kc = torch.div(k_positions, chunk_len, rounding_mode="floor").unsqueeze(-2)
    return (qc - kc).clamp(0, 2).long()


def dca_length_factor(n: int, original: int | None) -> float:
    """The factor q and k are each multiplied by at ``n`` tokens: ``max(1, 0.1 · ln(n /
    original) + 1)`` (YaRN's temperature of the ratio), 1 without ``original``."""
    if original is None or n <= original:
        return 1.0
    return 0.1 * math.log(n / original) + 1.0
