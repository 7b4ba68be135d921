"""PaTH attention's math (posenc.functional.path) against its equation written out: explicit
``d × d`` transforms ``H_t = I − β_t w_t w_tᵀ`` multiplied token by token, in float64;
blocks of every size (smaller than, dividing or not, larger than the sequence), grouped
key heads, queries that are the last of the keys (a KV cache), float32 within a bound
derived from its roundings, and gradients by ``gradcheck``."""

import pytest
import torch

from posenc.functional.path import PATH_BLOCK, path_nonfinite, path_scores, path_transforms


def transform_matrices(x, weight, beta_weight, beta_bias):
    """``H_t = I − β_t w_t w_tᵀ`` of every token and head from the paper's parametrisation,
    ``w_t = W x_t / ‖W x_t‖``, ``β_t = 2 σ(u · x_t + b)``: ``[b, heads, seq, d, d]``."""
    x = x.double()
    w = torch.einsum("hed,bsd->bhse", weight.double(), x)
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.sigmoid(
        torch.einsum("hd,bsd->bhs", beta_weight.double(), x) + beta_bias[:, None].double()
    )
    eye = torch.eye(w.shape[-1], dtype=torch.float64)
    return eye - beta[..., None, None] * w.unsqueeze(-1) * w.unsqueeze(-2)


def naive_scores(q, k, matrices):
    """``q_iᵀ H_i H_{i−1} ··· H_{j+1} k_j`` for every query (the last ``q_len`` of the
    ``k_len`` tokens) and key ``j <= i``, the product formed one matrix at a time; 0 for
    ``j > i``. matrices ``[b, kv_h, k_len, d, d]``."""
    b, h, q_len, d = q.shape
    kv_h, k_len = k.shape[1], k.shape[2]
    out = torch.zeros(b, h, q_len, k_len, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kh = hi // (h // kv_h)
            for row in range(q_len):
                i = k_len - q_len + row
                product = torch.eye(d, dtype=torch.float64)
                for j in range(i, -1, -1):
                    out[bi, hi, row, j] = q[bi, hi, row].double() @ product @ k[bi, kh, j].double()
                    product = product @ matrices[bi, kh, j]  # H_i ··· H_j for key j - 1
    return out


def inputs(b, h, kv_h, q_len, k_len, d, dim=6, dtype=torch.float64):
    x = torch.randn(b, k_len, dim, dtype=dtype)
    params = (
        torch.randn(kv_h, d, dim, dtype=dtype),
        torch.randn(kv_h, dim, dtype=dtype),
        torch.randn(kv_h, dtype=dtype),
    )
    q = torch.randn(b, h, q_len, d, dtype=dtype)
    k = torch.randn(b, kv_h, k_len, d, dtype=dtype)
    return q, k, x, params


# (batch, heads, kv_heads, q_len, k_len, head_dim, block)
SHAPES = [
    (1, 1, 1, 5, 5, 3, 2),  # blocks of 2, one partial
    (2, 4, 2, 7, 7, 4, 3),  # grouped key heads
    (1, 2, 1, 3, 9, 4, 4),  # queries the last 3 of 9 tokens (a KV cache)
    (1, 2, 2, 1, 10, 3, 4),  # one query (a decoding step)
    (1, 1, 1, 6, 6, 4, PATH_BLOCK),  # a block larger than the sequence: one of its length
    (1, 2, 1, 19, 21, 4, PATH_BLOCK),  # ... of an odd length past 16 (inverted by halves)
    (1, 3, 1, 9, 13, 3, 2),  # many blocks, query blocks not aligned to the keys'
    (1, 2, 2, 8, 8, 5, 4),  # blocks that divide the length
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_scores_equal_the_product_of_transforms_float64(shape):
    b, h, kv_h, q_len, k_len, d, block = shape
    q, k, x, params = inputs(b, h, kv_h, q_len, k_len, d)
    a = path_transforms(x, *params)
    got = path_scores(q, k, a, block=block)
    want = naive_scores(q, k, transform_matrices(x, *params))
    # float64 with a chain of ~k_len·(d + 2·block) roundings: far below a wrong product
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_the_query_token_has_no_transform_and_the_key_token_none():
    """``s_ii = q_i·k_i`` and ``s_{i,i−1} = q_iᵀ H_i k_{i−1}``: the query's transform is in
    the product, the key's is not (flash-linear-attention's decoding turns each cached key
    by the new token's transform before the new key joins)."""
    q, k, x, params = inputs(1, 1, 1, 4, 4, 3)
    a = path_transforms(x, *params)
    s = path_scores(q, k, a, block=2)
    h = transform_matrices(x, *params)[0, 0]
    diag = (q[0, 0] * k[0, 0]).sum(-1)
    torch.testing.assert_close(s[0, 0].diagonal(), diag, atol=1e-13, rtol=0)
    for i in range(1, 4):
        want = q[0, 0, i] @ h[i] @ k[0, 0, i - 1]
        torch.testing.assert_close(s[0, 0, i, i - 1], want, atol=1e-13, rtol=0)


def test_keys_after_their_query_score_zero():
    q, k, x, params = inputs(2, 2, 1, 6, 6, 3)
    s = path_scores(q, k, path_transforms(x, *params), block=4)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert torch.equal(s.masked_select(future), torch.zeros(2 * 2 * 15, dtype=s.dtype))


def test_zero_transforms_are_plain_scores():
    q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    got = path_scores(q, k, torch.zeros(1, 2, 5, 4), block=2)
    want = (q @ k.transpose(-1, -2)).tril()
    torch.testing.assert_close(got, want, atol=4 * 1.2e-7 * 16, rtol=0)


def test_transforms_are_the_papers_householder_like_matrices():
    """``I − a aᵀ`` of each vector is ``I − β w wᵀ`` with ``w`` a unit vector and ``β = 2σ(u·x
    + b)`` in ``(0, 2)``: eigenvalues 1 and ``1 − β`` in ``(−1, 1)``."""
    _, _, x, params = inputs(2, 1, 3, 1, 5, 4)
    a = path_transforms(x, *params)
    eye = torch.eye(4, dtype=torch.float64)
    torch.testing.assert_close(
        eye - a.unsqueeze(-1) * a.unsqueeze(-2), transform_matrices(x, *params), atol=1e-14, rtol=0
    )
    beta = a.square().sum(-1)
    assert (beta > 0).all() and (beta < 2).all()


def test_float32_within_its_rounding_bound(tol):
    """float32 against the float64 equation. A carried query passes through at most
    ``k_len`` transforms, each applied as products of inner length ``d`` and ``block`` (its
    block's ``I − Aᵀ T A``, ``‖H‖ <= 1``), and a score is one more dot product of ``d``:
    ``n = k_len·(d + 2·block) + d`` roundings, each relative to ``max‖q‖·max‖k‖`` (scores
    and carried vectors never exceed it). The block's ``T`` has entries of at most 2 in
    magnitude (``−a_tᵀ (H ···) a_u``): a factor 4 more."""
    b, h, kv_h, q_len, k_len, d, block = 2, 4, 2, 24, 40, 8, 8
    q, k, x, params = inputs(b, h, kv_h, q_len, k_len, d)
    a = path_transforms(x, *params)
    want = path_scores(q, k, a, block=block)
    got = path_scores(q.float(), k.float(), a.float(), block=block)
    assert got.dtype == torch.float32
    size = q.norm(dim=-1).max().item() * k.norm(dim=-1).max().item()
    bound = tol(n=4 * (k_len * (d + 2 * block) + d), scale=size)
    torch.testing.assert_close(got.double(), want, atol=bound["atol"], rtol=0)


def test_float32_transforms_of_float64_inputs_stay_float64():
    q, k, x, params = inputs(1, 1, 1, 3, 3, 2)
    assert path_transforms(x.float(), *(p.float() for p in params)).dtype == torch.float32
    assert path_scores(q, k.float(), path_transforms(x, *params).float()).dtype == torch.float64


def test_zero_projection_is_the_identity():
    x = torch.zeros(1, 3, 4)
    a = path_transforms(x, torch.randn(2, 3, 4), torch.randn(2, 4), torch.randn(2))
    assert torch.equal(a, torch.zeros(1, 2, 3, 3))


def test_gradcheck_scores():
    q, k, x, params = inputs(1, 2, 1, 3, 5, 3)
    a = path_transforms(x, *params).detach()
    args = [t.clone().requires_grad_() for t in (q, k, a)]
    assert torch.autograd.gradcheck(lambda q, k, a: path_scores(q, k, a, block=2), args)


def test_gradcheck_transforms_parameters():
    q, k, x, params = inputs(1, 2, 2, 4, 4, 3, dim=3)
    args = [t.clone().requires_grad_() for t in (x, *params)]

    def scores(x, weight, beta_weight, beta_bias):
        return path_scores(q, k, path_transforms(x, weight, beta_weight, beta_bias), block=3)

    assert torch.autograd.gradcheck(scores, args)


def test_root_beta_keeps_a_finite_gradient_where_the_gate_underflows():
    """``√β`` from ``exp(½ log σ(z))``: at ``z = −200``, where ``σ(z)`` underflows to 0 in
    float32, ``√(2σ)`` would give the gradient ``inf · 0 = NaN``."""
    x = torch.ones(1, 1, 1)
    bias = torch.full((1,), -200.0, requires_grad=True)
    a = path_transforms(x, torch.ones(1, 2, 1), torch.zeros(1, 1), bias)
    a.sum().backward()
    assert torch.isfinite(a).all() and torch.isfinite(bias.grad).all()
    assert (bias.grad >= 0).all()


def test_nonfinite_marks_the_scores_that_read_a_bad_value():
    """A NaN query marks its row, a NaN key its column, a NaN transform of token 3 the
    scores of queries at 3 and after with keys before 3 (the transform lies between)."""
    q, k, a = torch.randn(1, 2, 4, 2), torch.randn(1, 1, 6, 2), torch.randn(1, 1, 6, 2)
    q[0, 1, 0] = float("nan")  # head 1, query 0 (token 2)
    k[0, 0, 1] = float("inf")
    a[0, 0, 3] = float("nan")
    got = path_nonfinite(q, k, a)  # queries are tokens 2 .. 5
    want = torch.zeros(1, 2, 4, 6, dtype=torch.bool)
    want[0, 1, 0] = True
    want[..., 1] = True
    for row, i in enumerate(range(2, 6)):
        if i >= 3:
            want[0, :, row, :3] = True
    assert torch.equal(got, want)
