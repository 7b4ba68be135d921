"""Stick-breaking attention (Tan, Shen, Yang, Panda, Courville, ICLR 2025, "Scaling
Stick-Breaking Attention: An Efficient Implementation and In-depth Study", arXiv:2410.17980).

The weights are not a softmax. Each key the query sees breaks off a share of a stick of
length one, the nearest key first: with ``β_ij = σ(s_ij)`` of the scaled score,

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik)

over the keys ``k`` between ``j`` and the query ``i`` that the query sees. A key takes what
the nearer ones left, so order comes from the process itself and no positional encoding is
needed. The rows sum to ``1 − Π_k (1 − β_ik)``: what is left of the stick. The paper's
equation covers the keys before the query (``j < i``); ``attend_current`` lets the query's
own key break first, and ``remainder`` gives what is left to the query's own value (the
rows then sum to one, and a first token, which sees no earlier key, reads its own value).

Computed in log space, as the paper does for stability: ``log β = logsigmoid(s)``,
``log(1 − β) = −softplus(s)``, and the product is a suffix sum of ``log(1 − β)`` along the
keys, so a row costs ``O(k_len)`` after its scores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["own_keys", "stick_breaking_weights"]


def stick_breaking_weights(
    scores: torch.Tensor,
    seen: torch.Tensor,
    current: torch.Tensor,
    *,
    attend_current: bool = False,
    remainder: bool = True,
) -> torch.Tensor:
    """The stick-breaking weights of each row, keys in the order of their positions.

    Args:
        scores: the scaled scores ``q_i·k_j·scale`` (a score the row does not see may be
            anything, NaN included: it takes no share and reaches nothing).
        seen: True where the query sees the key, its own key included.
        current: True at the query's own key, the one at its position (a key it does not
            see, another packed document's at the same position, is not).
        attend_current: whether the query's own key breaks the stick first (else only the
            keys before it do, as in the paper's equation).
        remainder: whether what no key took, ``Π_k (1 − β_ik)``, weighs the query's own
            value.

    Shapes:
        scores ``[..., q_len, k_len]``; seen and current broadcastable to it -> the
        weights, ``[..., q_len, k_len]`` in the dtype of ``scores``.
    """
    current = current & seen  # another document's key at the same position is not its own
    takes = seen if attend_current else seen & ~current
    s = torch.where(takes, scores, 0.0)  # a score no share is taken by: out of the math
    log_rest = torch.where(takes, -F.softplus(s), 0.0)  # log(1 − β), 0 for the others
    # Σ log(1 − β) over the keys after j (nearer the query): the suffix sum from j + 1
    suffix = log_rest.flip(-1).cumsum(-1).flip(-1)
    after = torch.cat([suffix[..., 1:], torch.zeros_like(suffix[..., :1])], dim=-1)
    weights = torch.where(takes, (F.logsigmoid(s) + after).exp(), 0.0)
    if remainder:
        weights = weights + suffix[..., :1].exp() * current  # the stick left over
    return weights


def own_keys(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """True where a key sits at its query's position: the query's own key (the one the rest
    of the stick weighs, and the one that breaks first with ``attend_current``).

    Shapes:
        q_positions ``[q_len]`` or ``[batch, q_len]``; k_positions ``[k_len]`` or ``[batch,
        k_len]`` -> ``[q_len, k_len]`` or ``[batch, 1, q_len, k_len]`` (as the causal mask).
    """
    own = q_positions[..., :, None] == k_positions[..., None, :]
    return own if own.dim() == 2 else own.unsqueeze(-3)
