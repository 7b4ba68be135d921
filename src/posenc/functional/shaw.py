"""Shaw's relative position representations (Shaw, Uszkoreit, Vaswani 2018, "Self-Attention
with Relative Position Representations", arXiv:1803.02155).

Each clipped distance ``clip(j - i, -k, k)`` has a learned key vector ``a^K`` and value
vector ``a^V`` (2k + 1 of each)::

    e_ij = q_i · (k_j + a^K[clip(j - i)]) / sqrt(d)        (eq. 4; q_i = x_i W^Q, ...)
    z_i  = sum_j alpha_ij (v_j + a^V[clip(j - i)])          (eq. 3)

Both relative terms are computed without an ``[L, L, d]`` tensor, as in the paper's §3.3:
the key term from ``q_i · a^K_r`` for the 2k + 1 distances r (``[L, 2k + 1]`` per head)
gathered by distance; the value term by summing each query's probabilities into its 2k + 1
distance bins and multiplying the bins by ``a^V``.
"""

from __future__ import annotations

import torch

from ..arguments import check_devices, check_float, check_int, check_tensor
from .dtypes import math_dtype

__all__ = ["shaw_index", "shaw_key_bias", "shaw_key_scores", "shaw_value_term"]


def shaw_index(relative_position: torch.Tensor, max_distance: int) -> torch.Tensor:
    """The table row of each distance ``j - i``: ``clip(j - i, -k, k) + k``.

    Elementwise (it runs inside a flex attention ``score_mod``).

    Shapes:
        relative_position ``[...]`` (integer) -> ``[...]`` in ``[0, 2 * max_distance]``
    """
    check_tensor("relative_position", relative_position, kinds=("int",))
    check_int("max_distance", max_distance, minimum=0)
    return relative_position.clamp(-max_distance, max_distance) + max_distance


def shaw_key_scores(q: torch.Tensor, key_table: torch.Tensor, scale: float) -> torch.Tensor:
    """``q_i · a^K_r * scale`` for every query and each of the ``2k + 1`` distances.

    Computed in float32 (float64 when ``q`` or the table is float64).

    Shapes:
        q ``[..., q_len, head_dim]``, key_table ``[2k + 1, head_dim]`` ->
        ``[..., q_len, 2k + 1]``
    """
    check_tensor("q", q)
    check_tensor("key_table", key_table, dims=(2,))
    check_devices(q=q, key_table=key_table)
    if q.dim() < 1 or q.shape[-1] != key_table.shape[1]:
        raise ValueError(
            f"q must be [..., q_len, head_dim] with key_table's head_dim {key_table.shape[1]}, "
            f"got shape {tuple(q.shape)}"
        )
    check_float("scale", scale)
    dtype = math_dtype(q.dtype, key_table.dtype)
    return (q.to(dtype) @ key_table.to(dtype).transpose(0, 1)) * scale


def shaw_key_bias(key_scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The key term of eq. 4, ``bias[..., i, j] = key_scores[..., i, index[i, j]]``.

    Args:
        key_scores: from :func:`shaw_key_scores`.
        index: :func:`shaw_index` of ``k_position - q_position``, with as many dimensions
            as ``key_scores`` and broadcastable against it in all but the last.

    Shapes:
        key_scores ``[b, h, q_len, 2k + 1]``, index ``[1, 1, q_len, k_len]`` or
        ``[b, 1, q_len, k_len]`` -> ``[b, h, q_len, k_len]``
    """
    check_tensor("key_scores", key_scores)
    check_tensor("index", index, kinds=("int",), dims=(key_scores.dim(),))
    check_devices(key_scores=key_scores, index=index)
    # gather on views expanded to the common shape: take_along_dim broadcasts the same
    # way but first wraps every index (a remainder over the whole [b, h, q_len, k_len]),
    # which made it 3x slower forward and 2x backward
    lead = torch.broadcast_shapes(key_scores.shape[:-1], index.shape[:-1])
    key_scores = key_scores.expand(*lead, key_scores.shape[-1])
    return key_scores.gather(-1, index.expand(*lead, index.shape[-1]))


def shaw_value_term(
    probs: torch.Tensor, value_table: torch.Tensor, index: torch.Tensor
) -> torch.Tensor:
    """The value term of eq. 3, ``sum_j probs[..., i, j] * a^V[index[i, j]]``.

    The probabilities are summed into ``2k + 1`` distance bins first (a scatter-add), then
    the bins multiply the table: ``O(L^2 + L k d)``, never an ``[L, L, head_dim]`` tensor.
    The math runs in the dtype of ``probs``.

    Shapes:
        probs ``[b, h, q_len, k_len]``, value_table ``[2k + 1, head_dim]``, index
        broadcastable to probs -> ``[b, h, q_len, head_dim]``
    """
    check_tensor("probs", probs)
    check_tensor("value_table", value_table, dims=(2,))
    check_tensor("index", index, kinds=("int",))
    check_devices(probs=probs, value_table=value_table, index=index)
    index = index.expand(probs.shape)  # a view: [b, h, q_len, k_len]
    bins = probs.new_zeros(*probs.shape[:-1], value_table.shape[0])  # [b, h, q_len, 2k + 1]
    bins = bins.scatter_add(-1, index, probs)
    return bins @ value_table.to(probs.dtype)
