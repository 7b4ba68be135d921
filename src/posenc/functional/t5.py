"""T5 relative position buckets (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", §2.1, arXiv:1910.10683).

A relative position ``key - query`` (T5's ``memory_position - context_position``) maps to
one of ``num_buckets`` buckets. Bidirectional: half the buckets for keys after the query,
half for keys at or before it. Within a half, the first half of the buckets hold the exact
distances ``0 .. max_exact - 1``; the rest cover ``max_exact .. max_distance``
logarithmically; every distance from ``max_distance`` on shares the last bucket.
Unidirectional (a causal decoder): keys after the query all fall in bucket 0, like distance 0.
"""

from __future__ import annotations

import math

import torch

from ..arguments import check_bool, check_int, check_tensor

__all__ = ["check_t5_buckets", "t5_relative_bucket"]


def check_t5_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """Validate the bucket settings and return the buckets per direction.

    Raises:
        TypeError: a size that is not an int.
        ValueError: too few buckets, an odd count when bidirectional, or a ``max_distance``
            within the exact buckets.
    """
    check_int("num_buckets", num_buckets)
    check_int("max_distance", max_distance)
    check_bool("bidirectional", bidirectional)
    half = num_buckets // 2 if bidirectional else num_buckets
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        raise ValueError(
            f"num_buckets must be >= {minimum} (bidirectional={bidirectional}: at least one "
            f"exact and one log-spaced bucket per direction), got {num_buckets}"
        )
    if bidirectional and num_buckets % 2:
        raise ValueError(f"num_buckets must be even when bidirectional, got {num_buckets}")
    max_exact = half // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must exceed the {max_exact} exact buckets per direction "
            f"(num_buckets={num_buckets}), got {max_distance}"
        )
    return half


def t5_relative_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """The T5 bucket of each relative position ``key_position - query_position``.

    Elementwise and free of data-dependent control flow, so it runs inside a flex attention
    ``score_mod`` on 0-d tensors. The log is taken of ``max(distance, max_exact) / max_exact
    >= 1``, so no ``log(0)`` (and no ``-inf`` cast to an integer) arises even on the
    branch ``torch.where`` discards. The float math is Mesh TensorFlow's and Hugging Face's
    (float32 log, truncated), so the buckets equal theirs.

    Args:
        relative_position: integer tensor of ``key - query`` distances, any shape.
        bidirectional: buckets for both directions (T5's encoder) or only for keys at or
            before the query (T5's decoder).
        num_buckets: the number of buckets (32 in T5); even when bidirectional.
        max_distance: the distance from which every position shares the last bucket of its
            direction (128 in T5).

    Returns:
        int64 buckets in ``[0, num_buckets)``, the shape of ``relative_position``.

    Shapes:
        relative_position ``[...]`` -> ``[...]``
    """
    check_tensor("relative_position", relative_position, kinds=("int",))
    half = check_t5_buckets(num_buckets, max_distance, bidirectional)
    relative_position = relative_position.long()
    if bidirectional:
        offset = (relative_position > 0).long() * half  # keys after the query: upper half
        distance = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        distance = (-relative_position).clamp(min=0)  # keys after the query count as 0
    max_exact = half // 2
    ratio = distance.clamp(min=max_exact).float() / max_exact  # >= 1: log is finite
    log_bucket = torch.log(ratio) / math.log(max_distance / max_exact) * (half - max_exact)
    large = (max_exact + log_bucket.long()).clamp(max=half - 1)
    return offset + torch.where(distance < max_exact, distance, large)
