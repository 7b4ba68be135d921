"""Shaw et al. 2018 (arXiv:1803.02155): the clipped index and both relative terms against
eqs. 3 and 4 written as loops over queries and keys."""

import pytest
import torch

from posenc.functional import shaw_index, shaw_key_bias, shaw_key_scores, shaw_value_term


def clip_row(j_minus_i, k):
    return max(-k, min(k, j_minus_i)) + k


@pytest.mark.parametrize("k", [1, 2, 5])
def test_index_clips_the_distance(k):
    distance = torch.arange(-9, 10)
    expected = torch.tensor([clip_row(d, k) for d in distance.tolist()])
    assert torch.equal(shaw_index(distance, k), expected)


def test_index_rejects_float_distances():
    with pytest.raises(TypeError, match="integer"):
        shaw_index(torch.zeros(3), 2)


@pytest.mark.parametrize("k", [1, 3])
def test_key_term_is_q_dot_a_k_of_the_clipped_distance(k, tol):
    b, h, q_len, k_len, d = 2, 3, 5, 7, 8
    q = torch.randn(b, h, q_len, d)
    table = torch.randn(2 * k + 1, d)
    q_pos, k_pos = torch.arange(k_len - q_len, k_len), torch.arange(k_len)
    scale = d**-0.5
    expected = torch.empty(b, h, q_len, k_len, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i, qp in enumerate(q_pos.tolist()):
                for j, kp in enumerate(k_pos.tolist()):
                    row = table[clip_row(kp - qp, k)].double()
                    expected[bi, hi, i, j] = (q[bi, hi, i].double() @ row) * scale
    index = shaw_index(k_pos[None, :] - q_pos[:, None], k)[None, None]  # [1, 1, q, k]
    got = shaw_key_bias(shaw_key_scores(q, table, scale), index)
    size = scale * (q.abs().double().max() * table.abs().double().max() * d).item()
    torch.testing.assert_close(got.double(), expected, **tol(n=d + 1, scale=size))


@pytest.mark.parametrize("k", [1, 3])
def test_value_term_is_the_probability_weighted_a_v(k, tol):
    b, h, q_len, k_len, d = 2, 2, 4, 6, 5
    probs = torch.rand(b, h, q_len, k_len).softmax(-1)
    table = torch.randn(2 * k + 1, d)
    q_pos, k_pos = torch.arange(k_len - q_len, k_len), torch.arange(k_len)
    expected = torch.zeros(b, h, q_len, d, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i, qp in enumerate(q_pos.tolist()):
                for j, kp in enumerate(k_pos.tolist()):
                    row = table[clip_row(kp - qp, k)].double()
                    expected[bi, hi, i] += probs[bi, hi, i, j].double() * row
    index = shaw_index(k_pos[None, :] - q_pos[:, None], k)[None, None]
    got = shaw_value_term(probs, table, index)
    size = table.abs().max().item()  # probabilities sum to 1
    torch.testing.assert_close(got.double(), expected, **tol(n=k_len + 2 * k + 2, scale=size))


def test_key_scores_work_in_float64_for_float64_inputs():
    q, table = torch.randn(1, 1, 2, 4).double(), torch.randn(3, 4)
    assert shaw_key_scores(q, table, 0.5).dtype == torch.float64
    assert shaw_key_scores(q.half(), table, 0.5).dtype == torch.float32


def test_key_table_of_another_head_dim_is_named():
    with pytest.raises(ValueError, match="key_table's head_dim 4"):
        shaw_key_scores(torch.randn(1, 2, 3, 8), torch.randn(5, 4), 0.125)
    with pytest.raises(ValueError, match="q and key_table must be on one device"):
        shaw_key_scores(torch.randn(1, 2, 3, 8), torch.randn(5, 8, device="meta"), 0.125)
