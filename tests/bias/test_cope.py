"""CoPE: against the paper's equations one score at a time, against x-transformers' ``CoPE``,
its properties (zero vectors are NoPE, open gates count tokens), attention by blocks of rows
equal to one block, its gradients through the checkpointed blocks, and a TransformerLM."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.call import PLAIN
from posenc.attn.runners.scores import contextual_attention
from posenc.bias.cope import CoPE
from posenc.functional.cope import cope_positions
from posenc.models import LayerPlan, TransformerLM

HEADS, D, MAX_POS = 4, 8, 5


def cope(max_pos=MAX_POS, init_std=1.0):
    return CoPE(n_heads=HEADS, head_dim=D, max_pos=max_pos, init_std=init_std)


def naive(q, k, v, table):
    """The paper's eqs. for every score, in float64, causal with the queries the last
    ``q_len`` keys: ``g_ij = σ(q_i·k_j/√d)``, ``p_ij = Σ_{t=j..i} g_it`` (clamped to
    ``P − 1``), ``e[p]`` interpolated, ``s_ij = q_i·k_j/√d + q_i·e[p_ij]``, softmax, values."""
    q, k, v, table = q.double(), k.double(), v.double(), table.detach().double()
    b, h, q_len, d = q.shape
    k_len, group = k.shape[2], h // k.shape[1]
    out = torch.zeros(b, h, q_len, d, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for qi in range(q_len):
                i = k_len - q_len + qi
                logits = [
                    float(q[bi, hi, qi] @ k[bi, hi // group, j]) / math.sqrt(d)
                    for j in range(i + 1)
                ]
                gates = [1 / (1 + math.exp(-s)) for s in logits]
                scores = []
                for j in range(i + 1):
                    p = min(sum(gates[j:]), table.shape[0] - 1)
                    low, w = math.floor(p), p - math.floor(p)
                    e = (1 - w) * table[low] + w * table[math.ceil(p)]
                    scores.append(logits[j] + float(q[bi, hi, qi] @ e))
                probs = torch.tensor(scores, dtype=torch.float64).softmax(0)
                out[bi, hi, qi] = probs @ v[bi, hi // group, : i + 1]
    return out


def bias_size(q, table):
    """How large the bias may be: ``|q|·max|e|`` summed over a head."""
    return (q.abs().sum(-1).max() * table.abs().max()).item()


@pytest.mark.parametrize(("kv_heads", "q_len", "k_len"), [(4, 7, 7), (2, 7, 7), (2, 3, 9)])
def test_attention_matches_the_paper(kv_heads, q_len, k_len, attention_tol):
    enc = cope()
    q = torch.randn(2, HEADS, q_len, D)
    k, v = torch.randn(2, kv_heads, k_len, D), torch.randn(2, kv_heads, k_len, D)
    out = posenc.attention(q, k, v, enc)
    expected = naive(q, k, v, enc.table)
    # the bias: a dot product of D over an interpolation of two rows, from float32 gates
    err = (D + 8 + k_len) * torch.finfo(torch.float32).eps * bias_size(q, enc.table)
    assert_close(out.double(), expected, **attention_tol(q, k, v, causal=True, score_err=err))


def test_bias_matches_x_transformers(tol):
    from x_transformers.x_transformers import CoPE as Peer

    enc = cope()
    peer = Peer(D, HEADS, MAX_POS)
    with torch.no_grad():
        peer.pos_emb.copy_(enc.table)
    q, k = torch.randn(2, HEADS, 10, D), torch.randn(2, HEADS, 10, D)
    logits = (q @ k.mT) / math.sqrt(D)
    future = torch.ones(10, 10, dtype=torch.bool).triu(1)
    theirs = peer(q, logits.masked_fill(future, -torch.finfo(logits.dtype).max))
    ours = enc.bias(torch.arange(10), torch.arange(10), q=q, k=k)
    seen = ~future  # x-transformers gives later keys a bias too; attention hides them
    rounding = tol(n=D + 14, scale=bias_size(q, enc.table))
    assert_close(ours[..., seen], theirs[..., seen], **rounding)


def test_zero_vectors_are_nope(attention_tol):
    enc = cope(init_std=0.0)  # the paper's initialisation
    q, k, v = torch.randn(3, 2, HEADS, 9, D).unbind()
    out = posenc.attention(q, k, v, enc)
    assert_close(out, posenc.attention(q, k, v), **attention_tol(q, k, v, causal=True))


def test_open_gates_count_tokens():
    """Gates of 1 count every key: ``p_ij = i − j + 1`` over the keys a query sees."""
    scores = torch.full((1, 1, 6, 6), 50.0)  # σ(50) = 1 in float32
    seen = torch.ones(6, 6, dtype=torch.bool).tril()
    positions = cope_positions(scores, seen)[0, 0]
    i, j = torch.arange(6).view(-1, 1), torch.arange(6).view(1, -1)
    assert torch.equal(positions[seen], (i - j + 1).float().expand(6, 6)[seen])
    assert torch.equal(positions[~seen], torch.zeros(15))  # later keys count nothing


def test_blocks_of_rows_equal_one_block(attention_tol):
    enc = cope()
    q, k, v = torch.randn(3, 2, HEADS, 13, D).unbind()
    allowed = (torch.ones(13, 13, dtype=torch.bool).tril(), None)
    one = contextual_attention(q, k, v, enc, allowed, D**-0.5, PLAIN, block=13)
    for block in (1, 4, 5):
        blocks = contextual_attention(q, k, v, enc, allowed, D**-0.5, PLAIN, block=block)
        assert_close(blocks, one, **attention_tol(q, k, v, causal=True))


def test_gradients_through_checkpointed_blocks(grad_tol, score_size, monkeypatch):
    """Blocks of 3 rows, recomputed in the backward, give the gradients of attention with the
    materialised bias (q, k, v and the position vectors)."""
    import posenc.attn.runners.scores as contextual

    monkeypatch.setattr(contextual, "BLOCK_SCORES", 2 * HEADS * 3 * 11)  # 3 rows a block
    enc = cope()
    q, k, v = (torch.randn(2, HEADS, 11, D, requires_grad=True) for _ in range(3))
    wanted = (q, k, v, enc.table)
    got = torch.autograd.grad(posenc.attention(q, k, v, enc).square().sum(), wanted)
    positions = torch.arange(11)
    scores = q @ k.mT / math.sqrt(D) + enc.bias(positions, positions, q=q, k=k)
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)
    reference = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
    expected = torch.autograd.grad(reference.square().sum(), wanted)
    size = score_size(q, k, causal=True) + bias_size(q, enc.table)
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e, **grad_tol(q, k, expected, size))


def test_only_auto_and_math_run_it():
    enc = cope()
    q = torch.randn(1, HEADS, 5, D)
    for backend in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="only backend='auto' or 'math'"):
            posenc.attention(q, q, q, enc, backend=backend)
    with pytest.raises(TypeError, match="no score_mod"):
        enc.score_mod()
    with pytest.raises(TypeError, match="pass k="):
        enc.bias(torch.arange(5), torch.arange(5), q=q)


def test_transformer_lm_with_a_window(sharpen, check_cached_decoding):
    plan = LayerPlan([{"encoding": "cope", "window": 4}, {"encoding": "cope"}])
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, plan=plan))
    with torch.no_grad():
        model.encoding.table.normal_()
    ids = torch.randint(0, 37, (2, 16))
    model(ids).logsumexp(-1).mean().backward()
    assert model.encoding.table.grad.abs().sum() > 0
    check_cached_decoding(model.eval(), ids[:, :5], 8)


def test_keys_on_another_device_are_refused_by_name():
    """q on the table's device and k on meta: named, not a torch device error."""
    enc = cope()
    q = torch.randn(1, HEADS, 3, D)
    with pytest.raises(ValueError, match="k is on meta"):
        enc.bias(torch.arange(3), torch.arange(3), q=q, k=q.to("meta"))
