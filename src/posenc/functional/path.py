"""PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda, Kim 2025, "PaTH Attention:
Position Encoding via Accumulating Householder Transformations", arXiv:2505.16381) as pure
functions.

Every token ``t`` has, per key head, a Householder-like transform ``H_t = I − β_t w_t w_tᵀ``
of the layer's input ``x_t``: ``w_t`` a unit vector (a learned projection, L2-normalised)
and ``β_t = 2 σ(u · x_t + b)`` in ``(0, 2)``. The score of the query ``i`` and the key
``j <= i`` passes through the transforms of the tokens after the key, up to and with the
query's own:

    s_ij = q_iᵀ H_i H_{i−1} ··· H_{j+1} k_j          (j = i: no transform, q_iᵀ k_i)

the paper's ``A_ij ∝ exp(k_jᵀ (Π_{s=j+1..i} H_s) q_i)``, and flash-linear-attention's
``fla/ops/path_attn`` convention: its decoding step turns every cached key by the new token's
transform, ``k_j ← H_t k_j``, before the new key joins them raw.

Since ``β > 0``, a transform is one vector, ``a_t = √β_t · w_t`` (``H_t = I − a_t a_tᵀ``,
``‖a_t‖² = β_t``): :func:`path_transforms` gives them from ``x``, :func:`path_scores` the
scores, blockwise (the paper's compact UT representation of a product of Householder
matrices): for a block of ``C``
tokens with transforms ``A`` (rows ``a_t``), the product of any run ``(j, i]`` of them,
latest first, is ``I − A_rᵀ T_r A_r`` with ``T = (I + strict_lower(A Aᵀ))⁻¹`` (``T_r`` its
diagonal block on the run: ``T`` is triangular). Queries are carried to the start of
their block, keys to the end of theirs, and the queries then through the blocks between,
one block's product (``O(C·d)`` per query) at a time. Time ``O(L²·(d + C))``; memory the
``[L, L]`` scores and ``O(L·d·L/C)`` carried queries, never ``[L, L, d]``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .dtypes import math_dtype

__all__ = ["PATH_BLOCK", "path_nonfinite", "path_scores", "path_transforms"]

#: the tokens per block of :func:`path_scores`
PATH_BLOCK = 64


def path_transforms(
    x: torch.Tensor,
    weight: torch.Tensor,
    beta_weight: torch.Tensor,
    beta_bias: torch.Tensor,
) -> torch.Tensor:
    """Every token's transform vector ``a_t = √β_t · w_t`` per head, in float32 (float64
    for float64 inputs): ``w_t = normalize(W_h x_t)`` and ``β_t = 2 σ(u_h · x_t + b_h)``,
    so that ``H_t = I − a_t a_tᵀ = I − β_t w_t w_tᵀ``. A projection of zero gives ``w_t =
    0``: the identity.

    Shapes:
        x ``[batch, seq, dim]``, weight ``[heads, head_dim, dim]``, beta_weight ``[heads,
        dim]``, beta_bias ``[heads]`` -> ``[batch, heads, seq, head_dim]``.
    """
    dtype = math_dtype(x.dtype, weight.dtype)
    x = x.to(dtype)
    heads, head_dim, dim = weight.shape
    w = F.linear(x, weight.to(dtype).reshape(heads * head_dim, dim))  # [b, seq, h * hd]
    w = w.unflatten(-1, (heads, head_dim)).transpose(1, 2)  # [b, h, seq, hd]
    w = F.normalize(w, dim=-1)
    logits = F.linear(x, beta_weight.to(dtype), beta_bias.to(dtype))  # [b, seq, h]
    # √β = √2 · exp(½ log σ(z)): exact where σ(z) underflows in the square root's gradient
    root_beta = math.sqrt(2.0) * torch.exp(0.5 * F.logsigmoid(logits))
    return w * root_beta.transpose(1, 2).unsqueeze(-1)


def path_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    transforms: torch.Tensor,
    *,
    block: int = PATH_BLOCK,
) -> torch.Tensor:
    """``q_iᵀ H_i ··· H_{j+1} k_j`` (unscaled) of every query and every key at or before
    it, where the queries are the last ``q_len`` of the keys' tokens; 0 for a key after its
    query. In float32 (float64 for float64 inputs); the key heads' transforms serve their
    group of query heads (grouped-query attention).

    Args:
        q: ``[b, h, q_len, d]``, the last ``q_len`` of the ``k_len`` tokens.
        k: ``[b, kv_h, k_len, d]``; ``h`` a multiple of ``kv_h``.
        transforms: ``[b, kv_h, k_len, d]``, each token's ``a_t`` (``H_t = I − a_t a_tᵀ``,
            :func:`path_transforms`); a zero vector is the identity.
        block: the tokens per block (the UT transform's size); fewer keys than that are one
            block of their number, not padded to it.

    Shapes:
        -> ``[b, h, q_len, k_len]``.
    """
    dtype = math_dtype(q.dtype, k.dtype, transforms.dtype)
    b, h, q_len, d = q.shape
    kv_h, k_len = k.shape[1], k.shape[2]
    g, c = h // kv_h, max(1, min(block, k_len))  # a short sequence: one block of its length
    n, m = -(-k_len // c), -(-q_len // c)  # key blocks, query blocks (the last m)
    # blocks end at the last token (zero tokens, no key and no transform, fill the first),
    # block first, so that a run of blocks is one batch: [b, kv_h, nc, d] -> [n, b, kv_h, c, d]
    keys, a = (
        F.pad(t.to(dtype), (0, 0, n * c - k_len, 0)).view(b, kv_h, n, c, d).permute(2, 0, 1, 3, 4)
        for t in (k, transforms)
    )
    # [b, h, mc, d] -> [m, b, kv_h, g * c, d]: a block's rows are its g heads' queries
    queries = F.pad(q.to(dtype), (0, 0, m * c - q_len, 0)).view(b, kv_h, g, m, c, d)
    queries = queries.permute(3, 0, 1, 2, 4, 5).reshape(m, b, kv_h, g * c, d)
    keys, a = keys.contiguous(), a.contiguous()

    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()  # t <= i
    strict = lower.tril(-1)  # u > j
    gram = (a @ a.transpose(-1, -2)).masked_fill(~strict, 0.0)  # [n, b, kv_h, c, c]
    ut = _unit_lower_inverse(gram)
    ak = (a @ keys.transpose(-1, -2)).masked_fill(~strict, 0.0)  # [n, b, kv_h, c(u), c(j)]
    # k_j through H_{j+1} .. to its block's end, [n, b, kv_h, c, d]
    carried_keys = keys - (ut @ ak).transpose(-1, -2) @ a

    a_q = a[n - m :]  # the queries' blocks
    rows_lower = lower.repeat(g, 1)  # [g * c, c]: t <= i in each head's rows
    qa_t = (queries @ a_q.transpose(-1, -2)).masked_fill(~rows_lower, 0.0) @ ut[n - m :]
    local = queries @ keys[n - m :].transpose(-1, -2) - qa_t @ ak[n - m :]
    carried = queries - qa_t @ a_q  # q_i through H_i .. H_(block start)

    out = queries.new_zeros(m, n, b, kv_h, g * c, c)  # [query block, key block, .., i, j]
    rows = torch.arange(m, device=q.device)
    out[rows, rows + n - m] = local.masked_fill(~rows_lower, 0.0)
    # transposed once, so that a run of blocks is a contiguous batch: [n, b, kv_h, d, c]
    a_t, keys_t = a.transpose(-1, -2).contiguous(), carried_keys.transpose(-1, -2).contiguous()
    for step in range(1, n):  # key blocks `step` before each query's
        first = max(0, step - (n - m))  # the query blocks with a key block that far back
        if first >= m:
            break
        carried = carried[first - (m - carried.shape[0]) :]
        span = slice(n - m + first - step, n - step)
        out[rows[first:], rows[first:] + n - m - step] = carried @ keys_t[span]
        carried = carried - ((carried @ a_t[span]) @ ut[span]) @ a[span]
    # [m, n, b, kv_h, g, c, c] -> [b, kv_h, g, m, c, n, c] -> [b, h, mc, nc]
    out = out.view(m, n, b, kv_h, g, c, c).permute(2, 3, 4, 0, 5, 1, 6).reshape(b, h, m * c, n * c)
    return out[:, :, m * c - q_len :, n * c - k_len :]


def path_nonfinite(q: torch.Tensor, k: torch.Tensor, transforms: torch.Tensor) -> torch.Tensor:
    """Where a score of :func:`path_scores` reads a value that is not finite: its query
    ``q_i``, its key ``k_j`` or a transform between them, ``a_t`` with ``j < t <= i`` (the
    queries are the last ``q_len`` of the keys' tokens). Arguments as :func:`path_scores`.

    Shapes:
        -> ``[b, h, q_len, k_len]`` bool (the entries of keys after their query included).
    """
    group, k_len, q_len = q.shape[1] // k.shape[1], k.shape[2], q.shape[2]
    bad_q = ~torch.isfinite(q).all(-1)  # [b, h, q_len]
    bad_k = (~torch.isfinite(k).all(-1)).repeat_interleave(group, dim=1)  # [b, h, k_len]
    # the non-finite transforms up to and with each token, [b, h, k_len]
    count = (~torch.isfinite(transforms).all(-1)).cumsum(-1).repeat_interleave(group, dim=1)
    between = count[..., k_len - q_len :, None] > count[..., None, :]  # some t in (j, i]
    return bad_q[..., None] | bad_k[..., None, :] | between


def _unit_lower_inverse(strict: torch.Tensor) -> torch.Tensor:
    """``(I + strict)⁻¹`` for strictly lower-triangular ``strict``, by halves: ``[[A, 0],
    [C, B]]⁻¹ = [[A⁻¹, 0], [−B⁻¹ C A⁻¹, B⁻¹]]`` (batched triangular solves of 16 rows
    and matrix products: one solve of 64 rows costs ten times more on the CPU).

    Shapes:
        strict ``[..., c, c]`` -> ``[..., c, c]``, lower-triangular with a unit diagonal.
    """
    c = strict.shape[-1]
    if c <= 16:
        eye = torch.eye(c, dtype=strict.dtype, device=strict.device).expand_as(strict)
        return torch.linalg.solve_triangular(strict + eye, eye, upper=False, unitriangular=True)
    half = c // 2
    top = _unit_lower_inverse(strict[..., :half, :half])
    bottom = _unit_lower_inverse(strict[..., half:, half:])
    corner = -(bottom @ strict[..., half:, :half] @ top)
    return torch.cat((F.pad(top, (0, c - half)), torch.cat((corner, bottom), dim=-1)), dim=-2)
