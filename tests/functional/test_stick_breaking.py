"""Stick-breaking weights: against the paper's product one key at a time (float64), their
properties (rows sum to one with the remainder, the nearest key first, unseen scores out of
the math), and their gradients."""

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.functional.stick_breaking import stick_breaking_weights


def naive_weights(scores, seen, current, attend_current, remainder):
    """``A_ij = β_ij Π_{j<k<i} (1 − β_ik)`` breaking the stick key by key from the nearest
    (the query's own key first when ``attend_current``), in float64; the rest of the stick
    onto the query's own key when ``remainder``."""
    rows, keys = scores.shape
    out = torch.zeros(rows, keys, dtype=torch.float64)
    for i in range(rows):
        own = int(current[i].nonzero()[0, 0])
        takers = [j for j in range(keys) if seen[i, j] and (j != own or attend_current)]
        rest = 1.0
        for j in sorted(takers, reverse=True):  # nearest first
            beta = 1.0 / (1.0 + math.exp(-float(scores[i, j])))
            out[i, j] = beta * rest
            rest *= 1.0 - beta
        if remainder:
            out[i, own] += rest
    return out


def causal(q_len, k_len):
    """(seen, current): queries the last ``q_len`` keys."""
    i = torch.arange(k_len - q_len, k_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return j <= i, j == i


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("remainder", [False, True])
@pytest.mark.parametrize(("q_len", "k_len"), [(6, 6), (2, 9)])
def test_the_papers_product(attend_current, remainder, q_len, k_len):
    torch.manual_seed(0)
    scores = 3 * torch.randn(q_len, k_len, dtype=torch.float64)
    seen, current = causal(q_len, k_len)
    seen = seen & (torch.rand(q_len, k_len) > 0.2) | current  # some keys masked
    got = stick_breaking_weights(
        scores, seen, current, attend_current=attend_current, remainder=remainder
    )
    expected = naive_weights(scores, seen, current, attend_current, remainder)
    # float64: logsigmoid, softplus and a suffix sum of k_len terms of size <= |s| + 1,
    # exponentiated (relative error of the exponent's absolute error)
    bound = (k_len + 4) * torch.finfo(torch.float64).eps * k_len * (scores.abs().max() + 1)
    assert_close(got, expected, atol=float(bound), rtol=0)


def test_float32_scores_within_their_rounding():
    torch.manual_seed(1)
    scores = 3 * torch.randn(1, 2, 7, 7)
    seen, current = causal(7, 7)
    got = stick_breaking_weights(scores, seen, current)
    expected = torch.stack(
        [naive_weights(s, seen, current, False, True) for s in scores[0].double()]
    )
    bound = 11 * torch.finfo(torch.float32).eps * 7 * (scores.abs().max() + 1)
    assert_close(got[0].double(), expected, atol=float(bound), rtol=0)


def test_rows_sum_to_one_with_the_remainder_and_at_most_one_without():
    scores = torch.randn(5, 5, dtype=torch.float64)
    seen, current = causal(5, 5)
    whole = stick_breaking_weights(scores, seen, current)
    assert_close(whole.sum(-1), torch.ones(5, dtype=torch.float64))
    dropped = stick_breaking_weights(scores, seen, current, remainder=False)
    assert (dropped.sum(-1) <= 1).all() and dropped[0].sum() == 0  # the first sees no key
    assert whole[0, 0] == 1  # ... and reads its own value


def test_the_nearest_key_breaks_first():
    """With every share nearly whole (1 − σ(50) = e^-50), the nearest key the query sees
    takes the stick."""
    scores = torch.full((4, 4), 50.0)
    seen, current = causal(4, 4)
    weights = stick_breaking_weights(scores, seen, current)
    expected = torch.tensor([[1.0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    assert_close(weights, expected, atol=1e-21, rtol=0)
    seen[3, 2] = False  # a masked key neither takes nor blocks
    assert_close(stick_breaking_weights(scores, seen, current)[3], expected[2], atol=1e-21, rtol=0)


def test_an_unseen_score_stays_out():
    scores = torch.randn(4, 4)
    seen, current = causal(4, 4)
    poisoned = scores.masked_fill(~seen, float("nan"))
    got = stick_breaking_weights(poisoned, seen, current)
    assert torch.equal(got, stick_breaking_weights(scores, seen, current))


def test_gradients():
    seen, current = causal(3, 5)
    scores = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    for attend in (False, True):
        assert torch.autograd.gradcheck(
            lambda s, a=attend: stick_breaking_weights(s, seen, current, attend_current=a),
            (scores,),
        )
