"""Stick-breaking attention: against the paper's equation one query at a time (float64), with
grouped-query heads, padding, packed documents and a window; by blocks of rows and their
gradients; what it refuses; and in a TransformerLM, decoding with its KV cache."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.call import PLAIN
from posenc.attn.runners.weights import weighted_attention
from posenc.models import LayerPlan, TransformerLM

HEADS, D = 4, 8


def naive(q, k, v, seen, attend_current=False, remainder=True, softcap=None):
    """``o_i = Σ_j A_ij v_j (+ rest · v_i)``, ``A_ij = β_ij Π_{j<k<i} (1 − β_ik)`` over the
    keys ``seen[b, i]`` allows, the nearest first, in float64; the queries are the last keys.

    Shapes: q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]``, seen ``[b, q_len, k_len]``.
    """
    q, k, v = q.double(), k.double(), v.double()
    b, h, q_len, d = q.shape
    k_len, group = k.shape[2], h // k.shape[1]
    out = torch.zeros(b, h, q_len, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for qi in range(q_len):
                own = k_len - q_len + qi
                keys = [j for j in range(k_len) if seen[bi, qi, j]]
                if not keys:
                    continue  # a row that sees no key: zeros
                rest = 1.0
                for j in sorted(keys, reverse=True):
                    if j == own and not attend_current:
                        continue
                    s = float(q[bi, hi, qi] @ k[bi, hi // group, j]) / math.sqrt(d)
                    s = s if softcap is None else softcap * math.tanh(s / softcap)
                    beta = 1 / (1 + math.exp(-s))
                    out[bi, hi, qi] += beta * rest * v[bi, hi // group, j]
                    rest *= 1 - beta
                if remainder:
                    out[bi, hi, qi] += rest * v[bi, hi // group, own]
    return out


def tol(q, k, v):
    """The float32 path against float64: each score is a dot product of ``d`` (``(d + 4)``
    roundings of ``S = max|q|·|k|/√d``); a log-weight sums up to ``k_len`` of them, and a
    suffix sum of ``k_len`` terms of size at most ``S + 1``; the weights then move by that
    relatively, and the output (a sum of ``k_len`` weighted values, weights summing to one)
    by that times ``max|v|``, plus its own ``k_len + 2`` roundings."""
    eps, k_len = torch.finfo(torch.float32).eps, k.shape[2]
    size = (q.norm(dim=-1).max() * k.norm(dim=-1).max() / math.sqrt(q.shape[-1])).item()
    log_err = k_len * (q.shape[-1] + 4) * eps * size + k_len * eps * k_len * (size + 1)
    return {"atol": (log_err + (k_len + 2) * eps) * v.abs().max().item(), "rtol": 0.0}


def causal(b, q_len, k_len):
    i = torch.arange(k_len - q_len, k_len)[:, None]
    return (torch.arange(k_len) <= i).expand(b, q_len, k_len)


@pytest.mark.parametrize("config", [{}, {"attend_current": True}, {"remainder": "drop"}])
@pytest.mark.parametrize(("kv_heads", "q_len", "k_len"), [(4, 7, 7), (2, 7, 7), (2, 3, 9)])
def test_attention_matches_the_paper(config, kv_heads, q_len, k_len):
    enc = posenc.create("stick_breaking", n_heads=HEADS, **config)
    q = torch.randn(2, HEADS, q_len, D)
    k, v = torch.randn(2, kv_heads, k_len, D), torch.randn(2, kv_heads, k_len, D)
    out = posenc.attention(q, k, v, enc)
    options = {
        "attend_current": config.get("attend_current", False),
        "remainder": config.get("remainder", "current") == "current",
    }
    expected = naive(q, k, v, causal(2, q_len, k_len), **options)
    assert_close(out.double(), expected, **tol(q, k, v))


def test_padding_documents_and_a_window():
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q, k, v = torch.randn(3, 2, HEADS, 8, D).unbind()
    pad = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8]).bool()
    out = posenc.attention(q, k, v, enc, key_padding_mask=pad)
    seen = causal(2, 8, 8) & pad[:, None, :]  # the pads' rows see no key: zeros
    assert_close(out.double(), naive(q, k, v, seen), **tol(q, k, v))
    docs = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]])
    out = posenc.attention(q, k, v, enc, segment_ids=docs)
    seen = causal(2, 8, 8) & (docs[:, :, None] == docs[:, None, :])
    assert_close(out.double(), naive(q, k, v, seen), **tol(q, k, v))
    out = posenc.attention(q, k, v, enc, window=3)
    i, j = torch.arange(8)[:, None], torch.arange(8)
    seen = causal(2, 8, 8) & (i - j < 3)
    assert_close(out.double(), naive(q, k, v, seen), **tol(q, k, v))


def test_a_softcap_caps_the_scores_before_the_stick_breaks():
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q, k, v = (3 * torch.randn(1, HEADS, 6, D) for _ in range(3))
    out = posenc.attention(q, k, v, enc, softcap=0.5)
    assert_close(out.double(), naive(q, k, v, causal(1, 6, 6), softcap=0.5), **tol(q, k, v))


def test_a_non_finite_value_reaches_only_the_rows_that_see_it():
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q, k, v = torch.randn(3, 1, HEADS, 6, D).unbind()
    v[:, :, 4] = float("nan")  # the fifth token's value
    out = posenc.attention(q, k, v, enc)
    assert out[:, :, 4:].isnan().all() and out[:, :, :4].isfinite().all()
    clean = posenc.attention(q[:, :, :4], k[:, :, :4], v[:, :, :4], enc)
    assert_close(out[:, :, :4], clean, **tol(q, k, v[:, :, :4]))


def test_blocks_of_rows_and_their_gradients(monkeypatch):
    """Blocks of 1, 4 and 5 rows equal one block; the gradients through the checkpointed
    blocks are those of the weights computed as the plain product in float64."""
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q, k, v = torch.randn(3, 2, HEADS, 11, D, dtype=torch.float64).unbind()
    allowed = (torch.ones(11, 11, dtype=torch.bool).tril(), None)
    own = torch.eye(11, dtype=torch.bool)
    one = weighted_attention(q, k, v, enc, allowed, own, D**-0.5, PLAIN, block=11)
    for block in (1, 4, 5):
        for by_index in (False, True):  # True: each block stops at its last query's key
            blocks = weighted_attention(
                q, k, v, enc, allowed, own, D**-0.5, PLAIN, block=block, by_index=by_index
            )
            assert_close(blocks, one, atol=1e-13, rtol=0)

    import posenc.attn.runners.scores as scores_runner

    monkeypatch.setattr(scores_runner, "BLOCK_SCORES", 2 * HEADS * 3 * 11)  # 3 rows a block
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    got = torch.autograd.grad(posenc.attention(q, k, v, enc).square().sum(), (q, k, v))
    beta = torch.sigmoid(q @ k.mT / math.sqrt(D))  # [b, h, i, j]
    i, j, m = torch.arange(11).view(-1, 1, 1), torch.arange(11).view(1, -1, 1), torch.arange(11)
    between = (j < m) & (m < i)  # [i, j, m]: the keys between j and i
    rest = torch.where(between, 1 - beta[..., :, None, :], 1.0).prod(-1)  # [b, h, i, j]
    weights = (beta * rest).masked_fill(~(j[..., 0] < i[..., 0]), 0.0)
    weights = weights + torch.diag_embed(1 - weights.sum(-1))  # the rest onto the query
    expected = torch.autograd.grad((weights @ v).square().sum(), (q, k, v))
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e, atol=1e-10, rtol=1e-10)


def test_what_it_refuses():
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q = torch.randn(1, HEADS, 5, D)
    for backend in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="backend must be 'auto' or 'math'"):
            posenc.attention(q, q, q, enc, backend=backend)
    with pytest.raises(ValueError, match="causal=True"):
        posenc.attention(q, q, q, enc, causal=False)
    with pytest.raises(ValueError, match="sink"):
        posenc.attention(q, q, q, enc, sinks=torch.zeros(HEADS))
    k = q[:, :, :3]
    with pytest.raises(ValueError, match="last of the keys' tokens, but q has 5 and k 3"):
        posenc.attention(q, k, k, enc, q_positions=torch.arange(5), k_positions=torch.arange(3))
    with pytest.raises(TypeError, match="call weights"):
        enc.bias(torch.arange(5), torch.arange(5))
    with pytest.raises(TypeError, match="call weights"):
        enc.bias_at(torch.tensor(0), torch.tensor(1), torch.tensor(0))
    with pytest.raises(TypeError, match="no score_mod"):
        enc.score_mod()
    with pytest.raises(TypeError, match="pass k="):
        enc.weights(torch.arange(5), torch.arange(5), q=q)
    with pytest.raises(ValueError, match="remainder"):
        posenc.create("stick_breaking", n_heads=HEADS, remainder="keep")
    with pytest.raises(TypeError, match="remainder"):
        posenc.create("stick_breaking", n_heads=HEADS, remainder=1)
    with pytest.raises(TypeError, match="attend_current"):
        posenc.create("stick_breaking", n_heads=HEADS, attend_current=1)


def test_packed_documents_restart_their_positions():
    """Positions that restart at 0 in each packed document are in order: not refused."""
    enc = posenc.create("stick_breaking", n_heads=HEADS)
    q = torch.randn(1, HEADS, 6, D)
    positions = torch.tensor([0, 1, 2, 0, 1, 2])
    docs = torch.tensor([[0, 0, 0, 1, 1, 1]])
    out = posenc.attention(
        q, q, q, enc, q_positions=positions, k_positions=positions, segment_ids=docs
    )
    alone = posenc.attention(q[:, :, 3:], q[:, :, 3:], q[:, :, 3:], enc)
    assert_close(out[:, :, 3:], alone, **tol(q, q, q))


def test_transformer_lm_trains_and_decodes(sharpen, check_cached_decoding):
    """A plan of a windowed stick-breaking layer and a RoPE one trains and decodes as it
    recomputes, past its window: the stick-breaking layer's cache keeps every key, in order
    (a rolling buffer would wrap)."""
    plan = LayerPlan([{"encoding": "stick_breaking", "window": 4}, {"encoding": "rope"}])
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, plan=plan))
    ids = torch.randint(0, 37, (2, 16))
    model(ids).logsumexp(-1).mean().backward()
    assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0  # through the weights
    check_cached_decoding(model.eval(), ids[:, :5], 8)
    assert model.cache_layout().keep == (None, None)
    alone = TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding="stick_breaking")
    check_cached_decoding(sharpen(alone).eval(), ids[:, :5], 8)
