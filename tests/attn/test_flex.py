"""Compiled flex attention: where it runs, its causal block masks (cached for the default
layout, per call for explicit positions and mask_mods), and the CPU head-size padding."""

import pytest
import torch

from posenc.attn.flex_masks import _default_mask
from posenc.attn.masks import FULL, AttnPattern
from posenc.attn.runners.flex import CPU_MIN_HEAD_DIM, flex_attention, flex_available

needs_flex = pytest.mark.skipif(
    not flex_available(torch.device("cpu")), reason="compiled flex attention does not run here"
)


def identity(score, b, h, q_idx, kv_idx):
    """A score_mod that adds nothing: flex attention is then plain attention."""
    return score


def qkv(q_len=8, k_len=24, d=8):
    """GQA inputs with a head size below ``CPU_MIN_HEAD_DIM`` and ``k_len % 16 == 8``: the
    case torch's CPU kernel gets wrong without the zero padding."""
    assert d < CPU_MIN_HEAD_DIM and k_len % 16 == 8
    return torch.randn(2, 4, q_len, d), torch.randn(2, 2, k_len, d), torch.randn(2, 2, k_len, d)


def test_flex_runs_on_cpu_with_a_vector_isa_and_cuda_only():
    assert flex_available(torch.device("meta")) is False
    assert isinstance(flex_available(torch.device("cpu")), bool)
    q = torch.randn(1, 1, 4, 8, device="meta")
    with pytest.raises(RuntimeError, match="does not run on this meta"):
        flex_attention(q, q, q, identity, None, None, True, 1.0)


def test_the_default_causal_block_mask_is_cached():
    cpu = torch.device("cpu")
    first = _default_mask(8, 24, cpu, True, FULL)
    assert _default_mask(8, 24, cpu, True, FULL) is first
    assert _default_mask(8, 16, cpu, True, FULL) is not first
    assert _default_mask(8, 24, cpu, True, AttnPattern(window=4)) is not first
    # the queries are the last 8 of the 24 keys: query 0 sees keys 0..16
    dense = first.to_dense()  # [1, 1, q_blocks, k_blocks]: one block here
    assert dense.shape[-2:] == (1, 1) and bool(dense.all())


#: each layout compiles its own kernel (about 4 s on a cold cache): ``make test-slow`` runs
#: them here, the default suite through ``test_backends``' non-causal T5 (no mask, the
#: default positions of a KV cache), ``test_masks``' padding with shared positions and
#: segments, and ``test_patterns_hf``' Llama 4 chunks after left padding (batched positions)
LAYOUTS = [
    pytest.param(layout, marks=pytest.mark.slow)
    for layout in ("default", "positions", "bidirectional", "mask_mod")
]


@needs_flex
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flex_equals_dense_attention(layout, dense_attention, attention_tol):
    """Every way to give flex its mask, against float64 attention with the same mask."""
    q, k, v = qkv()
    q_pos, k_pos = torch.arange(16, 24), torch.arange(24)
    allowed = k_pos <= q_pos[:, None]  # [q, k]: the default layout's causal mask
    kwargs = {"q_positions": None, "k_positions": None, "causal": True, "mask_mod": None}
    if layout == "positions":  # batched, and not the default: row 1 sees 4 keys less
        q_pos = torch.stack((q_pos, q_pos - 4))
        kwargs.update(q_positions=q_pos, k_positions=k_pos.expand(2, -1))
        allowed = (k_pos <= q_pos[..., None]).unsqueeze(1)  # [b, 1, q, k]
    elif layout == "bidirectional":
        kwargs["causal"], allowed = False, None
    elif layout == "mask_mod":  # even keys only (a padding mask), no causal part
        kwargs["mask_mod"] = lambda b, h, q_idx, kv_idx: kv_idx % 2 == 0
        allowed = (k_pos % 2 == 0).expand(8, -1)
    with torch.no_grad():
        out = flex_attention(q, k, v, identity, scale=q.shape[-1] ** -0.5, **kwargs)
    assert out.shape == q.shape and out.dtype == q.dtype
    expected = dense_attention(q, k, v, allowed=allowed)
    torch.testing.assert_close(out.double(), expected, **attention_tol(q, k, v, allowed=allowed))
