"""Converting q/k projections between the two RoPE pair layouts.

RoPE rotates pairs of dimensions, and two layouts of those pairs exist (Su et al. 2021,
arXiv:2104.09864, for the rotation itself):

- ``interleaved`` (the paper, GPT-J, Meta's reference code): pair i is dimensions (2i, 2i + 1);
- ``half`` (GPT-NeoX, Hugging Face Llama): pair i is dimensions (i, i + d/2).

Pair i turns by the same angle in both, so the layouts differ only by where the pair's two
coordinates sit in the head. Reordering the rows of the query and key projections by that
fixed permutation therefore makes a checkpoint trained in one layout give identical
attention in the other: q·k is a sum over dimensions (any common reordering of q and k
leaves it unchanged), and the values and output projection are not touched. This is the
permutation Hugging Face's Llama conversion script applies to Meta's ``wq``/``wk``
(interleaved -> half; its ``PermuteForRope`` in ``core_model_loading.py`` since v5).

With partial rotary, only the leading ``rotary_dim`` dimensions of each head rotate; they
are permuted among themselves (pairs (i, i + rotary_dim/2) against (2i, 2i + 1)) and the rest
stay in place.
"""

from __future__ import annotations

import torch

from ..config import check_choice, check_device, check_int
from ..functional.rope import ROPE_LAYOUTS

__all__ = ["layout_permutation", "permute_for_layout"]


def _check_dims(head_dim: int, rotary_dim: int | None) -> int:
    check_int("head_dim", head_dim, minimum=2, even=True)
    if rotary_dim is None:
        return head_dim
    check_int("rotary_dim", rotary_dim, minimum=2, even=True)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim ({rotary_dim}) exceeds head_dim ({head_dim})")
    return rotary_dim


def layout_permutation(
    head_dim: int,
    src: str = "interleaved",
    dst: str = "half",
    *,
    rotary_dim: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The index that reorders one head from the ``src`` pair layout to ``dst``.

    ``x_dst = x_src[..., perm]`` for a query or key head, and ``w_dst = w_src[perm]`` for the
    rows of one head of a projection. From ``interleaved`` to ``half``, ``perm[i] = 2i`` and
    ``perm[i + r/2] = 2i + 1`` for ``i < r/2`` (``r = rotary_dim``); ``half`` to
    ``interleaved`` is its inverse; ``src == dst`` is the identity. Dimensions from
    ``rotary_dim`` on map to themselves.

    Shapes:
        returns ``[head_dim]`` (int64)
    """
    check_choice("src", src, ROPE_LAYOUTS)
    check_choice("dst", dst, ROPE_LAYOUTS)
    rotary_dim = _check_dims(head_dim, rotary_dim)
    perm = torch.arange(head_dim, device=check_device(device))
    if src == dst:
        return perm
    # interleaved -> half: half index (r, i) (= r·n + i) takes interleaved index 2i + r
    n = rotary_dim // 2
    to_half = perm[:rotary_dim].view(n, 2).t().reshape(rotary_dim)  # [2, n] -> [2n]
    if src == "half":  # the inverse: interleaved index 2i + r takes half index r·n + i
        to_half = torch.argsort(to_half)
    return torch.cat((to_half, perm[rotary_dim:]))


def permute_for_layout(
    weight: torch.Tensor,
    n_heads: int,
    head_dim: int,
    src: str = "interleaved",
    dst: str = "half",
    *,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Reorder the rows of a q or k projection so that a checkpoint trained with RoPE pairs
    in the ``src`` layout gives the same attention with ``dst`` pairs.

    Pass the key projection with its own head count (``n_kv_heads`` under grouped-query
    attention); value and output projections need no change. The result is a new tensor,
    also when ``src == dst``; the input is not modified.

    Args:
        weight: a ``torch.nn.Linear`` weight ``[n_heads * head_dim, in_features]`` or its
            bias ``[n_heads * head_dim]``.
        n_heads: the heads of this projection (query heads for q, key/value heads for k).
        head_dim: the size of each head (even).
        src, dst: ``"interleaved"`` or ``"half"``.
        rotary_dim: how many leading dimensions of each head rotate (partial rotary);
            default ``head_dim``.

    Shapes:
        weight ``[n_heads * head_dim, in_features]`` or ``[n_heads * head_dim]`` -> the same

    Example:
        >>> w = torch.arange(8.0).unsqueeze(1)  # one head of 8 rows, one input feature
        >>> permute_for_layout(w, n_heads=1, head_dim=8).flatten().tolist()
        [0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    check_int("n_heads", n_heads)
    perm = layout_permutation(head_dim, src, dst, rotary_dim=rotary_dim, device=weight.device)
    if weight.dim() not in (1, 2):
        raise ValueError(
            "weight must be a projection weight [n_heads * head_dim, in_features] or a bias "
            f"[n_heads * head_dim], got shape {tuple(weight.shape)}"
        )
    rows = weight.shape[0]
    if rows != n_heads * head_dim:
        raise ValueError(
            f"weight has {rows} rows but n_heads * head_dim = {n_heads} * {head_dim} = "
            f"{n_heads * head_dim} (for a key projection under grouped-query attention, "
            "pass n_heads=n_kv_heads)"
        )
    heads = weight.unflatten(0, (n_heads, head_dim))  # [n_heads, head_dim, (in_features)]
    return heads.index_select(1, perm).flatten(0, 1)  # a copy, also for src == dst
