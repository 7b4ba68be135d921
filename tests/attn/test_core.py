"""attention(): against a naive reference, with GQA, KV-cache layouts and encoding dispatch."""

import dataclasses

import pytest
import torch

import posenc
from posenc.base import BiasEncoding, RotaryEncoding
from posenc.config import EncodingConfig


def qkv(b=2, h=4, kv_h=4, lq=6, lk=6, d=8, dtype=torch.float32):
    return (
        torch.randn(b, h, lq, d, dtype=dtype),
        torch.randn(b, kv_h, lk, d, dtype=dtype),
        torch.randn(b, kv_h, lk, d, dtype=dtype),
    )


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_reference(causal, kv_heads, dense_attention, attention_tol):
    q, k, v = qkv(kv_h=kv_heads)
    allowed = torch.ones(6, 6).tril().bool() if causal else None
    out = posenc.attention(q, k, v, causal=causal)
    expected = dense_attention(q, k, v, allowed=allowed)
    torch.testing.assert_close(out.double(), expected, **attention_tol(q, k, v, allowed=allowed))


def test_kv_cache_layout_queries_are_the_last_positions(attention_tol):
    q, k, v = qkv(lq=6, lk=6)
    full = posenc.attention(q, k, v)
    # other query counts take other kernels: each within the bound, twice it apart
    rounding = {"atol": 2 * attention_tol(q, k, v, causal=True)["atol"], "rtol": 0}
    torch.testing.assert_close(posenc.attention(q[:, :, 4:], k, v), full[:, :, 4:], **rounding)
    torch.testing.assert_close(posenc.attention(q[:, :, 5:], k, v), full[:, :, 5:], **rounding)


def test_explicit_positions_define_the_causal_mask(dense_attention, attention_tol):
    q, k, v = qkv(b=2, lq=3, lk=5)
    q_pos = torch.tensor([[1, 2, 4], [0, 3, 4]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
    allowed = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]).expand(2, 4, 3, 5)
    out = posenc.attention(q, k, v, q_positions=q_pos, k_positions=k_pos)
    expected = dense_attention(q, k, v, allowed=allowed)
    torch.testing.assert_close(out.double(), expected, **attention_tol(q, k, v, allowed=allowed))
    default = posenc.attention(q, k, v)
    explicit = posenc.attention(
        q, k, v, q_positions=torch.arange(2, 5), k_positions=torch.arange(5)
    )
    # a boolean mask and the kernel's causal flag: each within the bound, twice it apart
    bound = 2 * attention_tol(q, k, v, causal=True)["atol"]
    torch.testing.assert_close(explicit, default, atol=bound, rtol=0)


@dataclasses.dataclass(frozen=True)
class _Heads(EncodingConfig):
    n_heads: int = 4


class DistanceBias(BiasEncoding):
    """Test double: bias = -(h + 1) * |i - j|."""

    Config = _Heads

    def bias_at(self, head, q_pos, k_pos):
        return -(head + 1) * (q_pos - k_pos).abs().float()


class Scale(RotaryEncoding):
    """Test double: multiplies q by (1 + position), keys by 2."""

    Config = _Heads

    def forward(self, q, k, positions=None, k_positions=None):
        if positions is None:  # the queries are the last of the keys, as in the base class
            positions = torch.arange(k.shape[2] - q.shape[2], k.shape[2])
        return q * (1 + positions.view(1, 1, -1, 1)), k * 2


@pytest.mark.parametrize(  # flex: a cold compile of this score_mod, in make test-slow
    "backend", ["auto", pytest.param("flex", marks=pytest.mark.slow), "sdpa", "math"]
)
@pytest.mark.parametrize("causal", [True, False])
def test_bias_encodings_are_added_to_the_scores(
    causal, backend, dense_attention, attention_tol, backends
):
    if backend == "flex" and backend not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    q, k, v = qkv(lq=3, lk=6, kv_h=2)
    enc = DistanceBias()
    bias = (
        -torch.arange(1.0, 5.0).view(-1, 1, 1)
        * (torch.arange(3, 6)[:, None] - torch.arange(6)).abs()
    )
    torch.testing.assert_close(enc.bias(torch.arange(3, 6), torch.arange(6)), bias)
    allowed = torch.ones(6, 6).tril().bool()[3:] if causal else None
    out = posenc.attention(q, k, v, encoding=enc, causal=causal, backend=backend)
    expected = dense_attention(q, k, v, bias, allowed)
    rounding = attention_tol(q, k, v, bias, allowed=allowed)  # an exact bias (integers)
    torch.testing.assert_close(out.double(), expected, **rounding)
    # explicit (batched) positions give the same result through every backend
    positions = torch.arange(6).expand(2, 6)
    out = posenc.attention(
        q,
        k,
        v,
        enc,
        q_positions=positions[:, 3:],
        k_positions=positions,
        causal=causal,
        backend=backend,
    )
    torch.testing.assert_close(out.double(), expected, **rounding)


def test_rotary_encodings_transform_q_and_k_with_query_positions(dense_attention, attention_tol):
    q, k, v = qkv(lq=2, lk=5)
    out = posenc.attention(q, k, v, encoding=Scale())
    q2 = q * torch.tensor([4.0, 5.0]).view(1, 1, 2, 1)
    expected = dense_attention(q2, 2 * k, v, allowed=torch.ones(5, 5).tril().bool()[3:])
    # q times 4 or 5 inside: one more rounding of each entry
    rounding = attention_tol(q2, 2 * k, v, causal=True, extra_n=1)
    torch.testing.assert_close(out.double(), expected, **rounding)


def test_none_is_plain_attention_and_additive_is_refused():
    q, k, v = qkv()
    torch.testing.assert_close(
        posenc.attention(q, k, v, encoding=posenc.create("nope")), posenc.attention(q, k, v)
    )
    with pytest.raises(ValueError, match="additive encoding: add it to the token embeddings"):
        posenc.attention(q, k, v, encoding=posenc.create("sinusoidal", dim=8))


def test_bad_inputs():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"q must be \[batch, heads, seq, head_dim\]"):
        posenc.attention(q[0], k, v)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        posenc.attention(q, k[:, :3], v[:, :3])
    with pytest.raises(TypeError, match="share a dtype"):
        posenc.attention(q, k.double(), v)
    with pytest.raises(TypeError, match="floating-point"):
        posenc.attention(q.long(), k, v)
    with pytest.raises(ValueError, match="pass q_positions and k_positions"):
        posenc.attention(q, k[:, :, :3], v[:, :, :3])
    with pytest.raises(ValueError, match="q_positions has 2 positions"):
        posenc.attention(q, k, v, q_positions=torch.arange(2))
    # another device was torch's "Tensor on device cpu is not on the expected device meta"
    with pytest.raises(ValueError, match="q, k, v must share a device, got cpu, meta, cpu"):
        posenc.attention(q, k.to("meta"), v)
    # finite but past float range once multiplied: refused as every configured number is
    with pytest.raises(ValueError, match=r"scale must be in \[1e-15, 1e\+15\], got 1e\+300"):
        posenc.attention(q, k, v, scale=1e300)
    with pytest.raises(ValueError, match=r"softcap must be in \[1e-15, 1e\+15\]"):
        posenc.attention(q, k, v, softcap=1e300, backend="math")


def test_bias_attention_checks_heads_and_batch():
    q, k, v = qkv(b=1, h=4, kv_h=2, lq=5, lk=5)
    with pytest.raises(
        ValueError, match=r"q has 4 heads but the encoding DistanceBias has n_heads=3"
    ):
        posenc.attention(q, k, v, encoding=DistanceBias(n_heads=3))
    positions = torch.arange(5).expand(2, 5)
    with pytest.raises(ValueError, match="q_positions has batch size 2 but the input has 1"):
        posenc.attention(q, k, v, q_positions=positions, k_positions=torch.arange(5))


# -- the cost of a call (issue 53): what does not change between calls is done once, every
# check stays on, and a call reads the host once at most (none with validation off)

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero"}
BIAS_NAMES = ["alibi", "fire", "kerple", "shaw", "t5"]


class CountReads(torch.overrides.TorchFunctionMode):
    """Host reads (as tests/test_host_reads.py counts them), but FIRE's pruning of its MLP to
    its inputs' range, a read on the CPU in eager mode only (where no stream stalls)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            import traceback

            self.count += not any(f.name == "_within" for f in traceback.extract_stack())
        return func(*args, **(kwargs or {}))


def host_reads(fn) -> int:
    with CountReads() as counter:
        fn()
    return counter.count


def _encoding(name: str | None):
    if name is None:
        return None
    return posenc.create(name, n_heads=2, **({"head_dim": 16} if name == "shaw" else {}))


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", [None, *BIAS_NAMES])
def test_a_call_reads_the_host_once_and_not_at_all_with_validation_off(name, grad):
    """Default positions need no read of their own, the encoding's derived values are
    kept: one read (whether q, k, v are finite), none with validation off, from the second
    call on (FIRE reads its threshold once, at the first)."""
    q, k, v = qkv(b=1, h=2, kv_h=2, lq=8, lk=8, d=16)
    enc = _encoding(name)
    with torch.set_grad_enabled(grad):
        posenc.attention(q, k, v, enc)
        assert host_reads(lambda: posenc.attention(q, k, v, enc)) == 1
        with posenc.validation(False):
            assert host_reads(lambda: posenc.attention(q, k, v, enc)) == 0
            fresh = _encoding(name)
            expected = 0 if name != "fire" else 1  # its threshold, read once
            assert host_reads(lambda: posenc.attention(q, k, v, fresh)) == expected


@pytest.mark.parametrize("name", [None, *BIAS_NAMES])
def test_positions_and_padding_are_checked_in_the_one_read(name):
    """Explicit positions (their checks and the facts the kernels choose by) and a padding
    mask are read with the finiteness of q, k, v: one read, and a bad one still raises."""
    q, k, v = qkv(b=2, h=2, kv_h=2, lq=8, lk=8, d=16)
    enc = _encoding(name)
    pad = torch.ones(2, 8, dtype=torch.bool)
    pad[0, :2] = False
    positions = {"q_positions": torch.arange(8), "k_positions": torch.arange(8)}
    assert host_reads(lambda: posenc.attention(q, k, v, enc, **positions)) == 1
    assert host_reads(lambda: posenc.attention(q, k, v, enc, key_padding_mask=pad)) == 1
    with pytest.raises(ValueError, match="q_positions must be >= 0"):
        posenc.attention(q, k, v, enc, q_positions=torch.arange(8) - 1, k_positions=torch.arange(8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", BIAS_NAMES)
def test_kept_work_gives_the_same_bits(name, dtype):
    """The first call (computing what is kept), the next ones (reading it) and a call with
    a backward (keeping nothing, on the autograd paths) give the same result, bit for
    bit."""
    q, k, v = qkv(b=1, h=2, kv_h=2, lq=8, lk=8, d=16, dtype=dtype)
    enc = _encoding(name).to(dtype)
    with torch.no_grad():
        first = posenc.attention(q, k, v, enc)
        again = posenc.attention(q, k, v, enc)
    q.requires_grad_(True)
    with_grad = posenc.attention(q, k, v, enc)
    with_grad.sum().backward()
    assert torch.equal(first, again)
    assert torch.equal(first, with_grad.detach())
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_q_and_k_in_the_seq_heads_layout_are_named_with_the_fix():
    """[batch, seq, heads, head_dim] tensors with GQA read as fewer keys than queries: the
    message names the layout and the transpose, not only the positions."""
    q, k = torch.randn(1, 8, 4, 16), torch.randn(1, 8, 2, 16)  # seq 8, 4 and 2 heads
    rope = posenc.create("rope", head_dim=16)
    with pytest.raises(ValueError, match=r"\[batch, heads, seq, head_dim\].*transpose\(1, 2\)"):
        posenc.attention(q, k, k)
    with pytest.raises(ValueError, match=r"transpose\(1, 2\)"):
        rope(q, k)
