"""``kernel="triton"``: the rotary encodings of the RoPE family (RoPE with its scalings,
M-RoPE, p-RoPE, xPos) turn q and k by the Triton kernel and give what the default
kernel gives, in an encoding's call, a model's forward and backward, and a decode over a
static cache, where the keys are rotated while written (one launch). On the CPU the
kernel runs under Triton's interpreter (tests/conftest.py sets ``TRITON_INTERPRET=1``).

Tolerances: both kernels compute a pair in float32 from the same tables, in another
order of roundings (a fused multiply-add), a few float32 ulps of the largest rotated
value; a model's logits then differ by what its float32 sums make of that
(``model_tol``).
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.models import TransformerLM
from posenc.models.blocks import writes_rotated

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB = 40

ENCODINGS = [
    ("rope", {"layout": "interleaved", "partial_rotary_factor": 0.5}),
    (
        "rope",
        {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}},
    ),
    ("mrope", {"mrope_section": [4, 6, 6]}),
    ("p_rope", {"p": 0.5}),
    ("xpos", {}),
]


def close(got, expected, x):
    """A few float32 ulps of the largest value (see the module)."""
    scale = 4 * x.abs().amax().item()
    assert_close(got, expected, atol=8 * 2**-23 * scale, rtol=8 * 2**-23)


@pytest.mark.parametrize(("name", "kwargs"), ENCODINGS, ids=[n for n, _ in ENCODINGS])
def test_an_encoding_turns_as_with_the_default_kernel(name, kwargs):
    """``enc(q, k)`` with grouped keys and per-row positions, and its gradients."""
    fast = posenc.create(name, head_dim=32, kernel="triton", **kwargs)
    plain = posenc.create(name, head_dim=32, **kwargs)
    q = torch.randn(2, 4, 7, 32, device=DEVICE, requires_grad=True)
    k = torch.randn(2, 2, 7, 32, device=DEVICE, requires_grad=True)
    positions = torch.stack([torch.arange(7), torch.arange(7) + 20]).to(DEVICE)
    if name == "mrope":  # [3, batch, seq] ids, the first row left-padded
        positions = torch.stack([positions, positions // 2, positions % 3])
        positions[:, 0, :2] = 0
    got = fast(q, k, positions)
    expected = plain(q, k, positions)
    grads = torch.randn_like(q), torch.randn_like(k)
    got_grads = torch.autograd.grad(got, (q, k), grads)
    expected_grads = torch.autograd.grad(expected, (q, k), grads)
    for a, b, x in zip(
        (*got, *got_grads), (*expected, *expected_grads), (q, k, *grads), strict=True
    ):
        close(a, b, x)


def test_attention_rotates_with_the_kernel(attention_tol):
    """``posenc.attention(q, k, v, enc)``: the encoding's call inside, the same output."""
    q, k, v = torch.randn(3, 2, 4, 10, 16, device=DEVICE).unbind()
    fast = posenc.create("rope", head_dim=16, kernel="triton")
    expected = posenc.attention(q, k, v, posenc.create("rope", head_dim=16))
    tol = attention_tol(q, k, v, causal=True, extra_n=16)  # q, k a few ulps apart
    assert_close(posenc.attention(q, k, v, fast), expected, **tol)


def test_a_model_trains_and_decodes_as_with_the_default_kernel(model_tol):
    """A training step's loss and gradients, then a decode over a static cache, where every
    layer rotates its new keys while writing them (``writes_rotated``)."""
    torch.manual_seed(0)
    spec = {"name": "rope", "kernel": "triton"}
    fast = TransformerLM(VOCAB, 32, 2, 4, encoding=spec, n_kv_heads=2).to(DEVICE)
    plain = TransformerLM(VOCAB, 32, 2, 4, encoding="rope", n_kv_heads=2).to(DEVICE)
    plain.load_state_dict(fast.state_dict())
    ids = torch.randint(0, VOCAB, (2, 9), device=DEVICE)
    losses = []
    for model in (fast, plain):
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
        loss.backward()
        losses.append(loss)
    assert_close(losses[0], losses[1], **model_tol(plain, 9, losses[1]))
    for a, b in zip(fast.parameters(), plain.parameters(), strict=True):
        assert_close(a.grad, b.grad, **model_tol(plain, 9, b.grad))
    fast.eval()
    cache = fast.new_cache(2, 12, static=True)
    with torch.no_grad():
        full = plain.eval()(ids)
        assert writes_rotated(fast.encoding, (), cache, 0)
        steps = [fast(ids[:, :5], cache=cache)]
        steps += [fast(ids[:, i : i + 1], cache=cache) for i in range(5, 9)]
    assert_close(torch.cat(steps, 1), full, **model_tol(plain, 9, full))
    tokens = fast.generate(ids[:, :4], 3)
    assert torch.equal(tokens, plain.generate(ids[:, :4], 3))


def test_the_kernel_is_asked_for_and_refused_by_name(monkeypatch):
    """Never chosen by itself; a bad name, or a device it cannot run on, is refused."""
    assert posenc.create("rope", head_dim=8).config.kernel == "auto"
    with pytest.raises(ValueError, match="kernel must be one of"):
        posenc.create("rope", head_dim=8, kernel="cuda")
    enc = posenc.create("rope", head_dim=8, kernel="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 1, 3, 8)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="kernel='triton' rotates CUDA tensors"):
            enc(q, q)
    with pytest.raises(ValueError, match="kernel='triton' rotates CUDA tensors"):
        enc(q.to("meta"), q.to("meta"))


def test_no_fused_write_where_it_does_not_apply():
    """xPos (keys scale apart), a ring layer, a gradient, a rolling cache, the default
    kernel: the keys are rotated, then stored, as before."""
    model = TransformerLM(VOCAB, 32, 1, 4, encoding={"name": "rope", "kernel": "triton"})
    static = model.new_cache(1, 8, static=True)
    xpos = posenc.create("xpos", head_dim=8, kernel="triton")
    with torch.no_grad():
        assert writes_rotated(model.encoding, (), static, 0)
        assert not writes_rotated(xpos, (), static, 0)
        assert not writes_rotated(posenc.create("rope", head_dim=8), (), static, 0)
        assert not writes_rotated(model.encoding, (), model.new_cache(1, 8), 0)
        assert not writes_rotated(model.encoding, None, static, 0)
    assert not writes_rotated(model.encoding, (), static, 0)  # grad mode
