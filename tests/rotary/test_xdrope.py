"""XD-RoPE (Tencent's Hunyuan-VL, HunyuanOCR): M-RoPE with four consecutive sections over
``[4, batch, seq]`` ids (sequence, width, height, image index), with NTK-alpha frequencies.

The reference is vLLM's ``XDRotaryEmbedding`` written out as a formula (MLX-VLM's port
agrees): pair j's angle is ``ids[a(j)] · θ_j``, ``a(j)`` the section holding j, and in the
``half`` layout both channels of pair j (``j`` and ``j + n``) turn by it.

transformers 5.24's ``HunYuanVLRotaryEmbedding`` recomposes ``cat(freqs, freqs)`` by
``2 · section`` channels instead, so the two channels of a pair follow different axes for
an image token: not a rotation, and not vLLM's. Text tokens (one id on every axis) agree;
:func:`test_transformers_turns_a_pairs_halves_by_different_axes` measures the difference,
and ``posenc.hf`` refuses ``hunyuan_vl`` by name (``test_hf_refuses_hunyuan_vl``)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.hf import rope_from_hf_config

SECTION = (4, 4, 4, 4)  # 16 pairs of a 32-channel head
ALPHA = 1000.0


def xdrope_ref(x: torch.Tensor, ids: torch.Tensor, section, base: float, alpha: float):
    """vLLM's XD-RoPE in float64: ``x`` ``[b, h, s, d]``, ids ``[4, b, s]``."""
    d = x.shape[-1]
    n = d // 2
    base = base * alpha ** (d / (d - 2))  # NTK-alpha
    theta = base ** (-2.0 * torch.arange(n, dtype=torch.float64) / d)
    axis = torch.repeat_interleave(torch.arange(4), torch.tensor(section))  # [n]
    pos = ids.double()[axis].permute(1, 2, 0)  # [b, s, n]: pair j's own axis's id
    ang = (pos * theta)[:, None]  # [b, 1, s, n]
    a, b = x.double()[..., :n], x.double()[..., n:]
    return torch.cat((a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()), dim=-1)


def make():
    return posenc.create(
        "mrope", head_dim=32, mrope_section=SECTION,
        scaling={"rope_type": "ntk_alpha", "alpha": ALPHA}, base=10000.0,
    )  # fmt: skip


def test_equals_vllms_definition():
    enc = make()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 7, 32, generator=g)
    ids = torch.randint(0, 50, (4, 2, 7), generator=g)
    q2, _ = enc(q, q, positions=ids)
    assert_close(q2.double(), xdrope_ref(q, ids, SECTION, 10000.0, ALPHA), atol=1e-5, rtol=0)


def test_text_ids_are_rope_with_ntk_alpha():
    enc = make()
    rope = posenc.create("rope", head_dim=32, scaling={"rope_type": "ntk_alpha", "alpha": ALPHA})
    q = torch.randn(1, 2, 9, 32)
    text = torch.arange(9)
    assert torch.equal(enc(q, q, positions=text.expand(4, 1, 9))[0], rope(q, q, positions=text)[0])


def test_scores_depend_on_the_id_offsets_only():
    enc = make()
    q, k = torch.randn(2, 1, 2, 5, 32).unbind()
    ids = torch.randint(0, 20, (4, 1, 5))
    shift = torch.tensor([3, 7, 1, 11]).view(4, 1, 1)
    a, b = enc(q, k, positions=ids)
    c, e = enc(q, k, positions=ids + shift)
    assert_close(a @ b.transpose(-1, -2), c @ e.transpose(-1, -2), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mrope_section": (4, 4, 4, 4), "mrope_interleaved": True}, "four in sections"),
        ({"mrope_section": (4, 4, 4, 2)}, "sums to 14"),
        ({"mrope_section": (4, 4, 4, 2, 2)}, "three ints"),
    ],
)
def test_bad_sections_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("mrope", head_dim=32, **kwargs)


def test_three_axis_ids_are_refused_for_four_sections():
    with pytest.raises(ValueError, match=r"\[4, batch, seq\]"):
        make()(torch.randn(1, 1, 3, 32), torch.randn(1, 1, 3, 32), positions=torch.zeros(3, 1, 3))


def test_transformers_turns_a_pairs_halves_by_different_axes():
    transformers = pytest.importorskip("transformers")
    vl = pytest.importorskip("transformers.models.hunyuan_vl.modeling_hunyuan_vl")
    config = transformers.HunYuanVLConfig(text_config={
        "hidden_size": 64, "num_attention_heads": 2, "head_dim": 32,
        "rope_parameters": {"rope_type": "dynamic", "factor": 1.0, "alpha": ALPHA,
                            "rope_theta": 10000.0, "mrope_section": list(SECTION)}})  # fmt: skip
    rotary = vl.HunYuanVLRotaryEmbedding(config.text_config)
    text = torch.arange(6).expand(4, 1, 6)
    image = torch.stack(
        (
            torch.full((6,), 5),
            torch.arange(6) % 3,
            torch.arange(6) // 3,
            torch.ones(6, dtype=torch.long),
        )
    )[:, None]
    x = torch.randn(1, 2, 6, 32)
    enc = make()
    for ids, agree in ((text, True), (image, False)):
        cos, sin = rotary(x, ids)
        theirs = x * cos[:, None] + vl.rotate_half(x) * sin[:, None]
        ours = enc(x, x, positions=ids)[0]
        assert torch.allclose(theirs, ours, atol=1e-4) == agree
        # the disagreement: a pair's two channels turned by different angles
        halves_differ = not torch.allclose(cos[..., :16], cos[..., 16:])
        assert halves_differ == (not agree)


def test_hf_refuses_hunyuan_vl():
    config = {"model_type": "hunyuan_vl", "text_config": {
        "model_type": "hunyuan_vl_text", "hidden_size": 64, "num_attention_heads": 2,
        "head_dim": 32,
        "rope_parameters": {"rope_type": "dynamic", "alpha": ALPHA, "rope_theta": 1e4,
                            "mrope_section": list(SECTION)}}}  # fmt: skip
    with pytest.raises(ValueError, match=r"hunyuan_vl.*halves"):
        rope_from_hf_config(config)


def test_inspect_names_the_refusal(tmp_path):
    from posenc.hf.inspect.checkpoint import inspect_checkpoint

    config = {"model_type": "hunyuan_vl", "text_config": {"model_type": "hunyuan_vl_text"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"model_type 'hunyuan_vl': its XD-RoPE .* refuses it"):
        inspect_checkpoint(tmp_path)
