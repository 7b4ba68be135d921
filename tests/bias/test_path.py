"""PaTH attention (posenc.bias.path, its runner posenc.attn.runners.path): attention against
the paper's equation written out with explicit ``d × d`` transforms in float64 (grouped key
heads, a KV cache's queries, padding, packed documents, a window, sinks and a softcap),
gradients by ``gradcheck``, what training keeps, non-finite inputs, the refusals, and a
TransformerLM with PaTH in its layers, trained and decoded with a KV cache."""

from unittest.mock import patch

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.bias.path import Path
from posenc.functional.path import path_transforms
from posenc.models import LayerPlan, TransformerLM

HEADS, DIM, HEAD_DIM = 4, 10, 3


def make(kv_heads=None, heads=HEADS, dtype=torch.float64):
    return Path(n_heads=heads, dim=DIM, head_dim=HEAD_DIM, kv_heads=kv_heads, dtype=dtype)


def inputs(batch=2, kv_heads=HEADS, q_len=7, k_len=7, dtype=torch.float64):
    q = torch.randn(batch, HEADS, q_len, HEAD_DIM, dtype=dtype)
    k = torch.randn(batch, kv_heads, k_len, HEAD_DIM, dtype=dtype)
    v = torch.randn(batch, kv_heads, k_len, HEAD_DIM, dtype=dtype)
    x = torch.randn(batch, k_len, DIM, dtype=dtype)
    return q, k, v, x


def matrices(enc, x):
    """``H_t = I − β_t w_t w_tᵀ``, ``w_t = W x_t/‖W x_t‖``, ``β_t = 2σ(u·x_t + b)``, from the
    encoding's parameters: ``[b, kv_heads, seq, d, d]``, float64."""
    x = x.double()
    w = torch.einsum("hed,bsd->bhse", enc.weight.detach().double(), x)
    w = w / w.norm(dim=-1, keepdim=True)
    logits = torch.einsum("hd,bsd->bhs", enc.beta_weight.detach().double(), x)
    beta = 2 * torch.sigmoid(logits + enc.beta_bias.detach().double()[:, None])
    eye = torch.eye(w.shape[-1], dtype=torch.float64)
    return eye - beta[..., None, None] * w.unsqueeze(-1) * w.unsqueeze(-2)


def naive(q, k, v, h_t, seen, scale=None, sinks=None, softcap=None):
    """Attention from the equation, one query at a time: ``s_ij = q_iᵀ H_i ··· H_{j+1} k_j ·
    scale`` (the product one matrix at a time), ``softcap``, the keys ``seen[b, i, j]`` (at
    or before the query's token), softmax with a sink logit per head if given, values. The
    queries are the last ``q_len`` of the keys' tokens. float64."""
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, q_len, d = q.shape
    k_len, group = k.shape[2], heads // k.shape[1]
    scale = d**-0.5 if scale is None else scale
    out = torch.zeros(batch, heads, q_len, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            kh = h // group
            for row in range(q_len):
                i = k_len - q_len + row
                product = torch.eye(d, dtype=torch.float64)
                scores = torch.full((k_len,), float("-inf"), dtype=torch.float64)
                for j in range(i, -1, -1):
                    s = q[b, h, row] @ product @ k[b, kh, j] * scale
                    if softcap is not None:
                        s = softcap * torch.tanh(s / softcap)
                    if seen[b, row, j]:
                        scores[j] = s
                    product = product @ h_t[b, kh, j]
                if sinks is not None:
                    scores = torch.cat((scores, sinks[h].double().view(1)))
                if torch.isinf(scores).all():
                    continue  # sees no key: zeros
                p = scores.softmax(0)[:k_len]
                out[b, h, row] = p @ v[b, kh]
    return out


def causal(batch, q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len).expand(batch, -1, -1)


@pytest.mark.parametrize(
    "kv_heads, q_len, k_len",
    [(HEADS, 7, 7), (2, 7, 7), (1, 3, 9), (2, 1, 10), (HEADS, 70, 70)],
    ids=["mha", "gqa", "cache", "decode", "two-blocks"],
)
def test_attention_matches_the_equation(kv_heads, q_len, k_len):
    enc = make(kv_heads)
    q, k, v, x = inputs(2 if k_len < 50 else 1, kv_heads, q_len, k_len)
    got = posenc.attention(q, k, v, enc, bias=enc.transforms(x))
    want = naive(q, k, v, matrices(enc, x), causal(q.shape[0], q_len, k_len))
    # float64 chains of ~k_len·(d + 2·64) roundings: far below a wrong transform
    assert_close(got, want, atol=1e-11, rtol=0)


def test_float32_within_its_rounding_bound(attention_tol):
    """float32 against the float64 equation: each score is off by at most ``n·eps·scale·
    max‖q‖·max‖k‖`` with ``n = 4·(k_len·(d + 2·64) + d)`` (see
    tests/functional/test_path.py), which :func:`attention_tol` carries to the output."""
    enc = make(2, dtype=torch.float32)
    q, k, v, x = inputs(2, 2, 9, 9, dtype=torch.float32)
    got = posenc.attention(q, k, v, enc, bias=enc.transforms(x))
    enc64 = make(2).requires_grad_(False)
    enc64.load_state_dict({n: p.double() for n, p in enc.state_dict().items()})
    want = naive(q, k, v, matrices(enc64, x), causal(2, 9, 9))
    scale = HEAD_DIM**-0.5
    size = q.double().norm(dim=-1).max() * k.double().norm(dim=-1).max() * scale
    err = 4 * (9 * (HEAD_DIM + 2 * 64) + HEAD_DIM) * torch.finfo(torch.float32).eps * size
    # the path scores as a bias on the plain ones: the weights attention_tol reads
    bias = enc64.bias(torch.arange(9), torch.arange(9), q=q.double(), k=k.double(), x=x.double())
    tol = attention_tol(q, k, v, bias=bias, causal=True, score_err=err.item())
    assert_close(got.double(), want, **tol)


def test_bias_is_the_change_to_the_plain_scores():
    enc = make(2)
    q, k, _, x = inputs(2, 2, 4, 6)
    h_t = matrices(enc, x)
    got = enc.bias(torch.arange(2, 6), torch.arange(6), q=q, k=k, x=x, scale=0.5)
    want = torch.zeros(2, HEADS, 4, 6, dtype=torch.float64)
    for b, h, row in ((b, h, r) for b in range(2) for h in range(HEADS) for r in range(4)):
        i, product = 2 + row, torch.eye(HEAD_DIM, dtype=torch.float64)
        for j in range(i, -1, -1):
            kj = k[b, h // 2, j]
            want[b, h, row, j] = 0.5 * (q[b, h, row] @ product @ kj - q[b, h, row] @ kj)
            product = product @ h_t[b, h // 2, j]
    assert_close(got, want, atol=1e-13, rtol=0)


def test_padded_keys_are_not_there():
    """A pad is hidden and its transform is the identity: a row with pads in its past gets
    the attention of the sequence without them."""
    enc = make(2)
    q, k, v, x = inputs(1, 2, 8, 8)
    real = torch.tensor([[True, True, False, True, False, False, True, True]])
    got = posenc.attention(q, k, v, enc, bias=enc.transforms(x), key_padding_mask=real)
    keep = real[0].nonzero().squeeze(1)
    alone = posenc.attention(
        q[:, :, keep], k[:, :, keep], v[:, :, keep], enc, bias=enc.transforms(x[:, keep])
    )
    assert_close(got[:, :, keep], alone, atol=1e-12, rtol=0)
    h_t = matrices(enc, x)
    h_t[:, :, ~real[0]] = torch.eye(HEAD_DIM, dtype=torch.float64)
    want = naive(q, k, v, h_t, causal(1, 8, 8) & real[:, None, :])
    assert_close(got, want, atol=1e-12, rtol=0)


def test_packed_documents_are_sequences_of_their_own():
    enc = make()
    q, k, v, x = inputs(1, HEADS, 9, 9)
    ids = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2, 2]])
    got = posenc.attention(q, k, v, enc, bias=enc.transforms(x), segment_ids=ids)
    for doc in range(3):
        t = (ids[0] == doc).nonzero().squeeze(1)
        alone = posenc.attention(
            q[:, :, t], k[:, :, t], v[:, :, t], enc, bias=enc.transforms(x[:, t])
        )
        assert_close(got[:, :, t], alone, atol=1e-12, rtol=0)


def test_a_kv_cache_step_equals_recomputation():
    """The last query over every key (a decoding step: raw keys, and the transforms of every
    cached token) is the last row of the whole sequence's attention."""
    enc = make(2)
    q, k, v, x = inputs(2, 2, 11, 11)
    full = posenc.attention(q, k, v, enc, bias=enc.transforms(x))
    for n in (1, 3):
        step = posenc.attention(q[:, :, -n:], k, v, enc, bias=enc.transforms(x))
        assert_close(step, full[:, :, -n:], atol=1e-12, rtol=0)


def test_window_sinks_and_softcap():
    enc = make(2)
    q, k, v, x = inputs(2, 2, 8, 8)
    sinks = torch.randn(HEADS, dtype=torch.float64)
    got = posenc.attention(q, k, v, enc, bias=enc.transforms(x), window=3, sinks=sinks, softcap=2.0)
    i, j = torch.arange(8)[:, None], torch.arange(8)
    seen = ((j <= i) & (j > i - 3)).expand(2, -1, -1)
    want = naive(q, k, v, matrices(enc, x), seen, sinks=sinks, softcap=2.0)
    assert_close(got, want, atol=1e-12, rtol=0)


def test_gradcheck_inputs_and_parameters():
    """q, k, v, the layer input and the transforms' parameters (through
    :func:`~posenc.functional.path.path_transforms`, which ``transforms`` calls)."""
    enc = make(2)
    q, k, v, x = inputs(1, 2, 3, 5)

    def attend(q, k, v, x, weight, beta_weight, beta_bias):
        a = path_transforms(x, weight, beta_weight, beta_bias)
        return posenc.attention(q, k, v, enc, bias=a)

    args = [t.detach().clone().requires_grad_() for t in (q, k, v, x, *enc.parameters())]
    assert torch.autograd.gradcheck(attend, args)
    a = enc.transforms(x)
    assert_close(a, path_transforms(x, *enc.parameters()), atol=0, rtol=0)


def test_encoding_parameters_get_gradients_through_attention():
    enc = make()
    q, k, v, x = inputs()
    posenc.attention(q, k, v, enc, bias=enc.transforms(x)).square().sum().backward()
    for p in enc.parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_training_keeps_no_score_or_transform_products():
    """Under a backward each block of query rows is checkpointed: autograd keeps nothing of
    ``[batch, heads, L, L]`` (nor of ``[L, L, d]``) between the forward and the backward,
    whatever its layout (the blocks' tensors lead with the block indices). Without the
    checkpoints (the row blocks run plainly), it would keep several."""
    enc = make(dtype=torch.float32)
    b, L = 1, 200
    q, k, v = (torch.randn(b, HEADS, L, HEAD_DIM, requires_grad=True) for _ in range(3))
    x = torch.randn(b, L, DIM)

    def largest_saved(forward):
        sizes = []

        def pack(t):
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = forward()
        return max(sizes), out

    def attend():
        return posenc.attention(q, k, v, enc, bias=enc.transforms(x))

    most, out = largest_saved(attend)
    assert most < b * HEADS * L * L  # the inputs, the transforms' projection: O(L·d)
    out.sum().backward()
    assert q.grad is not None and enc.weight.grad is not None
    with patch("posenc.attn.runners.path.row_blocks", unchecked):
        most, _ = largest_saved(attend)
    assert most >= b * HEADS * L * L  # the check sees what it looks for


def unchecked(rows, q_len, block, train):
    """:func:`~posenc.attn.runners.scores.row_blocks` without its checkpoints."""
    return torch.cat([rows(i, min(i + block, q_len)) for i in range(0, q_len, block)], dim=2)


def test_nonfinite_values_reach_only_the_rows_that_read_them():
    """A NaN transform of token 4 reaches the scores of the queries at 4 and after with the
    keys before 4 (rows NaN), not the queries before it; a NaN future key reaches nobody
    earlier."""
    enc = make(dtype=torch.float32)
    q, k, v, x = inputs(1, HEADS, 8, 8, dtype=torch.float32)
    a = enc.transforms(x).detach()
    clean = posenc.attention(q, k, v, enc, bias=a)
    a[:, :, 4] = float("nan")
    got = posenc.attention(q, k, v, enc, bias=a)
    assert_close(got[:, :, :4], clean[:, :, :4])
    assert got[:, :, 4:].isnan().all()
    k2 = k.clone()
    k2[:, :, 6] = float("inf")
    got = posenc.attention(q, k2, v, enc, bias=enc.transforms(x))
    assert_close(got[:, :, :6], clean[:, :, :6])


def test_bad_calls_raise():
    enc = make(2)
    q, k, v, x = inputs(2, 2)
    a = enc.transforms(x)
    with pytest.raises(ValueError, match=r"pass bias=path\.transforms\(x\)"):
        posenc.attention(q, k, v, enc)
    with pytest.raises(ValueError, match=r"bias must be the transforms of 'path'"):
        posenc.attention(q, k, v, enc, bias=a[..., :2])
    with pytest.raises(TypeError, match="bias must be a floating-point tensor"):
        posenc.attention(q, k, v, enc, bias=[1.0])
    with pytest.raises(ValueError, match=r"causal attention only \(causal=True\)"):
        posenc.attention(q, k, v, enc, bias=a, causal=False)
    for backend in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="backend must be 'auto' or 'math'"):
            posenc.attention(q, k, v, enc, bias=a, backend=backend)
    with pytest.raises(ValueError, match="queries must be the last of the keys' tokens"):
        positions = torch.arange(7)
        posenc.attention(q, k[:, :, :5], v[:, :, :5], enc, bias=a[:, :, :5],
                         q_positions=positions, k_positions=positions[:5])  # fmt: skip
    with pytest.raises(TypeError, match="pass x="):
        enc.transforms(None)
    with pytest.raises(ValueError, match=r"x must be \[batch, seq, dim\] with dim=10"):
        enc.transforms(x[..., :4])
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        enc.transforms(x.long())
    with pytest.raises(TypeError, match="depend on the queries and keys: pass k="):
        enc.bias(torch.arange(7), torch.arange(7), q=q, x=x)
    with pytest.raises(ValueError, match=r"k must be \[batch, heads, len, head_dim\] with heads=2"):
        enc.bias(torch.arange(7), torch.arange(7), q=q, k=q, x=x)
    with pytest.raises(TypeError, match="not on positions"):
        enc.bias_at(torch.tensor(0), torch.tensor(1), torch.tensor(0))
    with pytest.raises(TypeError, match="no score_mod"):
        enc.score_mod()
    with pytest.raises(ValueError, match=r"kv_heads \(3\) must divide n_heads \(4\)"):
        make(3)
    with pytest.raises(ValueError, match="kv_heads"):
        make(0)
    with pytest.raises(ValueError, match="missing required config"):
        posenc.create("path", n_heads=4, dim=8)


def test_transformer_lm_trains_and_decodes(sharpen, check_cached_decoding):
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding="path"))
    transforms = [e for e in model.encodings if isinstance(e, Path)]
    assert len(transforms) == 2 and len({id(e.weight) for e in transforms}) == 2  # per layer
    ids = torch.randint(0, 37, (4, 16))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 37), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(e.weight.grad is not None and e.weight.grad.abs().sum() > 0 for e in transforms)
    check_cached_decoding(model.eval(), ids[:, :5], 9)


def test_transformer_lm_plans_windows_and_grouped_heads(sharpen, check_cached_decoding):
    """PaTH beside RoPE in a plan, a windowed PaTH layer with a rolling cache (the kept keys
    carry their transforms), grouped key heads."""
    path = {"name": "path", "kv_heads": 2}
    plan = LayerPlan([{"encoding": path, "window": 4}, {"encoding": "rope"}, {"encoding": path}])
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                                  plan=plan))  # fmt: skip
    assert model.eval().new_cache(2, 20).rolling
    check_cached_decoding(model, torch.randint(0, 37, (2, 6)), 10)


def test_transformer_lm_fills_in_its_key_heads():
    """A model hands its ``n_kv_heads`` to PaTH (one transform per key head), and refuses an
    encoding given with other key heads, naming them."""
    model = TransformerLM(
        vocab_size=11, dim=16, n_layers=1, n_heads=4, n_kv_heads=2, encoding="path"
    )
    assert model.encoding.kv_heads == 2 and model.encoding.weight.shape == (2, 4, 16)
    wrong = posenc.create("path", n_heads=4, dim=16, head_dim=4)
    with pytest.raises(ValueError, match="has kv_heads=4 but the model needs kv_heads=2"):
        TransformerLM(vocab_size=11, dim=16, n_layers=1, n_heads=4, n_kv_heads=2, encoding=wrong)
    with pytest.raises(ValueError, match="was given kv_heads=1 but the model needs kv_heads=2"):
        TransformerLM(vocab_size=11, dim=16, n_layers=1, n_heads=4, n_kv_heads=2,
                      encoding={"name": "path", "kv_heads": 1})  # fmt: skip


def test_scale_of_the_transforms_matches_the_paper():
    """``‖a_t‖² = β_t ∈ (0, 2)``: ``H_t`` has eigenvalues 1 and ``1 − β_t`` (negative ones
    allowed, the paper's reason for ``2σ``)."""
    enc = make()
    a = enc.transforms(torch.randn(3, 5, DIM, dtype=torch.float64))
    beta = a.square().sum(-1)
    assert (beta > 0).all() and (beta < 2).all()
    x = torch.randn(1, 1, DIM, dtype=torch.float64)
    logits = enc.beta_weight.detach() @ x[0, 0] + enc.beta_bias.detach()
    assert_close(enc.transforms(x).square().sum(-1)[0, :, 0], 2 * torch.sigmoid(logits))
