"""Multi-head latent attention's decoupled RoPE (:class:`~posenc.rotary.LatentRoPE`):
transformers' DeepSeek-V3 attention reproduced, a written-out reference, its properties,
bad input.

The parity models are tiny and randomly initialised (no downloads); positions stay below
~32 so that transformers' float32 angles are exact to ~1e-5 and the comparisons are tight.
"""

import math

import pytest
import torch
from torch import nn

import posenc
from posenc.functional import join_latent_heads, mla_softmax_scale
from posenc.functional.rope_scaling import yarn_mscale
from posenc.hf import latent_rope_from_hf_config
from posenc.rotary import LatentRoPE, MRoPE, RoPE

NOPE, ROPE, V_DIM, HEADS, KV_RANK, HIDDEN = 8, 8, 8, 4, 16, 64
SEQ, START = 20, 4  # positions 4..23: past the YaRN original length below (16)
YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "mscale": 1.0,
    "mscale_all_dim": 0.8,  # != mscale: YaRN's cos/sin factor is not 1 either
}
SCALINGS = {"default": {"rope_type": "default"}, "yarn": YARN}


def latent(layout="interleaved", scaling="default", nope=NOPE):
    return LatentRoPE(nope, RoPE(head_dim=ROPE, layout=layout, scaling=SCALINGS[scaling]))


def inputs(batch=2, q_len=SEQ, k_len=SEQ, dtype=torch.float32):
    """q ``[b, h, q_len, nope + rope]``, k_rope ``[b, 1, k_len, rope]``, k_nope ``[b, h,
    k_len, nope]``."""
    q = torch.randn(batch, HEADS, q_len, NOPE + ROPE, dtype=dtype)
    return (
        q,
        torch.randn(batch, 1, k_len, ROPE, dtype=dtype),
        torch.randn(batch, HEADS, k_len, NOPE, dtype=dtype),
    )


def rotation_err(positions, q_rope, k_rope):
    """A bound on how far a score ``scale·q_rope·k_rope`` (before the scale) computed from
    two rotations of the same slices lies apart, float32 against float32 or float64.

    Each rotated pair is off by ``δ·|pair|``: its angle by ``4·eps·|angle|`` (transformers
    rounds the position, the frequency's power and quotient, and the product in float32;
    posenc's float64 angle is exact to ~1e-16), and by ``8·eps`` for the roundings of
    cos, sin, the attention factor and the rotation's two products and sum, on both sides.
    A dot product of pairs each off by ``δ`` relatively is off by at most ``2δ·|q|·|k|``
    (Cauchy–Schwarz over the pairs), so ``2δ·max|q_rope|·max|k_rope|``, row norms.
    """
    eps = torch.finfo(torch.float32).eps
    delta = eps * (4 * float(positions.abs().max()) + 8)  # the largest frequency is 1
    q_norm = q_rope.detach().double().norm(dim=-1).max().item()
    k_norm = k_rope.detach().double().norm(dim=-1).max().item()
    return 2 * delta * q_norm * k_norm


# ---------------------------------------------------------------- transformers' DeepSeek-V3


def tiny_deepseek(q_lora_rank, scaling, interleave):
    """transformers' DeepSeek-V3 attention of layer 0 (eager softmax) and its rotary
    embedding, of a one-layer tiny config, with sharp random weights."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    config = transformers.DeepseekV3Config(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=KV_RANK,
        qk_nope_head_dim=NOPE,
        qk_rope_head_dim=ROPE,
        v_head_dim=V_DIM,
        num_hidden_layers=1,
        intermediate_size=32,
        moe_intermediate_size=16,
        n_routed_experts=4,
        n_group=1,
        topk_group=1,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        rope_parameters={**SCALINGS[scaling], "rope_theta": 10000.0},
        rope_interleave=interleave,
    )
    config._attn_implementation = "eager"
    attention = DeepseekV3Attention(config, layer_idx=0).eval()
    # transformers' init (std 0.02) gives near-uniform attention, which would hide a wrong
    # rotation or scale; with std 0.1 a wrong layout, the scale without its mscale or
    # frequencies 5% off move the output by 30 to 300 times the tolerance
    for module in attention.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.1)
    return config, attention, DeepseekV3RotaryEmbedding(config)


def posenc_mla(attention, mla, hidden):
    """The same attention with posenc doing every positional step: transformers' own
    projections (so only the rotation, the shared key slice and the scale are posenc's),
    then :class:`LatentRoPE` and :func:`posenc.attention`. Returns the output and the q,
    k, v that went into attention."""
    b, s, _ = hidden.shape
    if attention.q_lora_rank is None:
        q = attention.q_proj(hidden)
    else:
        q = attention.q_b_proj(attention.q_a_layernorm(attention.q_a_proj(hidden)))
    q = q.view(b, s, HEADS, NOPE + ROPE).transpose(1, 2)  # [b, h, s, nope + rope]
    latent_kv, k_rope = attention.kv_a_proj_with_mqa(hidden).split([KV_RANK, ROPE], dim=-1)
    k_rope = k_rope.view(b, 1, s, ROPE)  # [b, 1, s, rope]: one slice for every head
    kv = attention.kv_b_proj(attention.kv_a_layernorm(latent_kv).view(b, 1, s, KV_RANK))
    kv = kv.view(b, s, HEADS, NOPE + V_DIM).transpose(1, 2)  # [b, h, s, nope + v]
    k_nope, v = kv.split([NOPE, V_DIM], dim=-1)
    positions = torch.arange(START, START + s)
    q, k = mla(q, k_rope, k_nope, positions)
    out = posenc.attention(q, k, v, scale=mla.softmax_scale, causal=True)  # [b, h, s, v]
    return attention.o_proj(out.transpose(1, 2).reshape(b, s, HEADS * V_DIM)), (q, k, v)


@pytest.mark.parametrize("interleave", [True, False], ids=["interleave", "half"])
@pytest.mark.parametrize("scaling", ["default", "yarn"])
@pytest.mark.parametrize("q_lora_rank", [None, 32], ids=["q_proj", "q_lora"])
@torch.no_grad()
def test_equals_transformers_deepseek_v3_attention(q_lora_rank, scaling, interleave, attention_tol):
    """posenc's decoupled RoPE inside DeepSeek-V3's projections gives transformers' output.

    transformers rotates its interleaved pairs into de-interleaved order (a permutation of
    q's and k's rope channels alike, which leaves every score unchanged), so the outputs
    are compared, not q and k. Tolerance: :func:`conftest._attention_tol` row by row, with
    the scores' rope part off by :func:`rotation_err` (float32 angles against posenc's
    float64 ones) and the output through ``o_proj``; a wrong layout, frequency, shared key
    slice or softmax scale moves the output by 1e-2 to 1e-1 (tolerance ~5e-4).
    """
    config, attention, rotary = tiny_deepseek(q_lora_rank, scaling, interleave)
    mla = latent_rope_from_hf_config(config)
    assert mla.rope.config.layout == ("interleaved" if interleave else "half")
    assert mla.softmax_scale == attention.scaling
    if scaling == "yarn":  # the temperature is in: 16 ** -0.5 alone would not be it
        assert mla.softmax_scale == 16**-0.5 * yarn_mscale(4.0, 0.8) ** 2
    hidden = torch.randn(2, SEQ, HIDDEN)
    cos, sin = rotary(hidden, torch.arange(START, START + SEQ)[None].expand(2, -1))
    mask = torch.full((SEQ, SEQ), -math.inf).triu(1).expand(2, 1, SEQ, SEQ)  # causal
    expected, _ = attention(hidden, (cos, sin), mask)
    ours, (q, k, v) = posenc_mla(attention, mla, hidden)
    positions = torch.arange(START, START + SEQ)
    err = mla.softmax_scale * rotation_err(positions, q[..., NOPE:], k[..., NOPE:])
    rounding = attention_tol(
        q,
        k,
        v,
        scale=mla.softmax_scale,
        causal=True,
        score_err=err,
        out_proj=attention.o_proj.weight,
    )
    torch.testing.assert_close(ours, expected, **rounding)


# ---------------------------------------------------------------- a written-out reference


def reference(mla, q, k_rope, k_nope, positions):
    """The decoupled RoPE written out in float64 with complex numbers: pair ``i`` of the
    rope slice (channels ``(2i, 2i + 1)`` interleaved, ``(i, i + d/2)`` half) is ``a + ib``,
    turned by ``factor·e^{i·m·θ_i}``; the nope slices pass; the one key slice is copied to
    every head. YaRN's θ_i and factor are the RoPE's (the parity test above checks those
    against transformers)."""
    n, layout = ROPE // 2, mla.rope.config.layout
    inv_freq, factor = mla.rope.inv_freq(), mla.rope.attention_factor()
    if mla.rope.scaling.rope_type == "default":  # θ_i = base^(-2i/d), written out
        inv_freq, factor = 10000.0 ** (-torch.arange(0, ROPE, 2, dtype=torch.float64) / ROPE), 1.0
    turn = torch.polar(
        torch.full((len(positions), n), factor, dtype=torch.float64),
        positions.double()[:, None] * inv_freq,
    )

    def rotate(x):
        x = x.double()
        if layout == "interleaved":
            z = torch.complex(x[..., 0::2], x[..., 1::2]) * turn
            return torch.stack((z.real, z.imag), dim=-1).flatten(-2)
        z = torch.complex(x[..., :n], x[..., n:]) * turn
        return torch.cat((z.real, z.imag), dim=-1)

    q_ref = torch.cat((q[..., :NOPE].double(), rotate(q[..., NOPE:])), dim=-1)
    k_shared = rotate(k_rope).expand(-1, HEADS, -1, -1)
    return q_ref, torch.cat((k_nope.double(), k_shared), dim=-1)


@pytest.mark.parametrize("scaling", ["default", "yarn"])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_equals_a_written_out_reference(layout, scaling, tol):
    """Tolerance: posenc's cos/sin are the float64 angles' rounded to float32, then a rotated
    channel is ``a·cos - b·sin`` (two products and a sum): four roundings of terms up to
    ``|a| + |b|``, against the float64 reference."""
    mla = latent(layout, scaling)
    q, k_rope, k_nope = inputs()
    positions = torch.arange(START, START + SEQ)
    q2, k2 = mla(q, k_rope, k_nope, positions)
    q_ref, k_ref = reference(mla, q, k_rope, k_nope, positions)
    factor = mla.rope.attention_factor()
    rounding = tol(n=4, scale=2 * factor * max(q.abs().max().item(), k_rope.abs().max().item()))
    torch.testing.assert_close(q2.double(), q_ref, **rounding)
    torch.testing.assert_close(k2.double(), k_ref, **rounding)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_shared_key_slice_and_untouched_nope_parts(layout):
    mla = latent(layout)
    q, k_rope, k_nope = inputs()
    q2, k2 = mla(q, k_rope, k_nope)
    assert q2.shape == (2, HEADS, SEQ, NOPE + ROPE) and k2.shape == (2, HEADS, SEQ, NOPE + ROPE)
    assert torch.equal(q2[..., :NOPE], q[..., :NOPE])
    assert torch.equal(k2[..., :NOPE], k_nope)
    for head in range(1, HEADS):  # every head has the same rotated key slice, bit for bit
        assert torch.equal(k2[:, head, :, NOPE:], k2[:, 0, :, NOPE:])
    _, k_rotated = mla.rope(q[..., NOPE:], k_rope)  # the shared slice is the RoPE's
    assert torch.equal(k2[:, :1, :, NOPE:], k_rotated)
    assert not torch.allclose(k2[..., NOPE:], k_rope.expand(-1, HEADS, -1, -1))  # it turned


@pytest.mark.parametrize("scaling", ["default", "yarn"])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_scores_depend_on_the_distance_only(layout, scaling):
    """The rope slice's scores at positions ``m + 7, n + 7`` are those at ``m, n`` (the
    nope slices carry no position, so the whole scores shift-invariant too); tolerance
    :func:`rotation_err` of the larger positions."""
    mla = latent(layout, scaling)
    q, k_rope, k_nope = inputs()
    positions = torch.arange(START, START + SEQ)
    scores = []
    for shift in (0, 7):
        q2, k2 = mla(q, k_rope, k_nope, positions + shift)
        scores.append(q2[..., NOPE:] @ k2[..., NOPE:].transpose(-1, -2))
    err = rotation_err(positions + 7, q2[..., NOPE:], k2[..., NOPE:])
    torch.testing.assert_close(scores[1], scores[0], atol=2 * err, rtol=0)
    q_only, _ = mla(q, k_rope, k_nope, positions + 1)  # but not the position of q alone
    moved = q_only[..., NOPE:] @ k2[..., NOPE:].transpose(-1, -2) - scores[1]
    assert moved.abs().max() > 100 * err


def test_default_positions_put_the_queries_last():
    """As for RoPE: a query block of 3 over 8 keys sits at positions 5, 6, 7 (decoding)."""
    mla = latent()
    q, k_rope, k_nope = inputs(q_len=3, k_len=8)
    expected = mla(q, k_rope, k_nope, torch.arange(5, 8), k_positions=torch.arange(8))
    for got, want in zip(mla(q, k_rope, k_nope), expected, strict=True):
        assert torch.equal(got, want)


def test_low_precision_inputs_rotate_in_float32_and_keep_their_dtype():
    """bfloat16 inputs turn by float32 cos/sin in float32 arithmetic, rounded once at the
    end: bit for bit the float32 result rounded (a bfloat16 table or product would not be)."""
    mla = latent("interleaved", "yarn")
    q, k_rope, k_nope = (t.bfloat16() for t in inputs())
    q16, k16 = mla(q, k_rope, k_nope)
    assert q16.dtype == k16.dtype == torch.bfloat16
    q32, k32 = mla(q.float(), k_rope.float(), k_nope.float())
    assert torch.equal(q16, q32.bfloat16()) and torch.equal(k16, k32.bfloat16())


def test_softmax_scale():
    assert latent().softmax_scale == 16**-0.5
    yarn = 16**-0.5 * (0.1 * 0.8 * math.log(4.0) + 1) ** 2
    assert latent(scaling="yarn").softmax_scale == pytest.approx(yarn, rel=1e-15)
    assert mla_softmax_scale(192, factor=40.0, mscale_all_dim=0) == 192**-0.5  # 0: absent
    assert mla_softmax_scale(192, factor=1.0, mscale_all_dim=1.0) == 192**-0.5  # no scaling
    no_temperature = {**YARN, "mscale_all_dim": None}
    assert LatentRoPE(8, RoPE(head_dim=8, scaling=no_temperature)).softmax_scale == 16**-0.5


def test_join_latent_heads_broadcasts_one_key_slice():
    q, k = join_latent_heads(
        torch.zeros(1, 3, 2, 4),
        torch.ones(1, 3, 2, 2),
        torch.zeros(1, 3, 5, 4),
        torch.arange(10.0).view(1, 1, 5, 2),
    )
    assert torch.equal(q, torch.cat((torch.zeros(1, 3, 2, 4), torch.ones(1, 3, 2, 2)), -1))
    assert torch.equal(k[..., 4:], torch.arange(10.0).view(1, 1, 5, 2).expand(1, 3, 5, 2))


def test_reads_a_deepseek_v3_config_json():
    mla = latent_rope_from_hf_config(
        {
            "model_type": "deepseek_v3",
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "rope_interleave": False,
            "max_position_embeddings": 163840,
            "rope_scaling": {
                "type": "yarn",
                "factor": 40.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
            },
        }
    )
    assert (mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.rope.config.layout) == (128, 64, "half")
    assert mla.rope.scaling.factor == 40.0 and mla.rope.attention_factor() == 1.0
    assert mla.softmax_scale == 192**-0.5 * (0.1 * math.log(40.0) + 1) ** 2


# ---------------------------------------------------------------- bad input


def test_bad_construction_raises_naming_the_parameter():
    rope = RoPE(head_dim=ROPE)
    with pytest.raises(ValueError, match="qk_nope_head_dim"):
        LatentRoPE(0, rope)
    with pytest.raises(TypeError, match="qk_nope_head_dim"):
        LatentRoPE(8.0, rope)
    with pytest.raises(TypeError, match=r"rope must be a posenc\.rotary\.RoPE, got MRoPE"):
        LatentRoPE(8, MRoPE(head_dim=16, mrope_section=(2, 3, 3)))
    with pytest.raises(TypeError, match="rope must be"):
        LatentRoPE(8, "rope")
    with pytest.raises(ValueError, match="rotary_dim is 4 of head_dim 8"):
        LatentRoPE(8, RoPE(head_dim=8, rotary_dim=4))
    with pytest.raises(ValueError, match="mscale_all_dim needs the YaRN factor"):
        mla_softmax_scale(16, mscale_all_dim=1.0)


def test_bad_tensors_raise_naming_the_tensor():
    mla = latent()
    q, k_rope, k_nope = inputs()
    cases = [
        ((q[..., :-1], k_rope, k_nope), ValueError, r"^q must be \(2, 4, 20, 16\)"),
        ((q[0], k_rope, k_nope), ValueError, "^q must be 4-D"),
        ((q, k_rope.expand(-1, HEADS, -1, -1), k_nope), ValueError, r"^k_rope must be \(2, 1,"),
        ((q, k_rope[..., :4], k_nope), ValueError, "^k_rope must be"),
        ((q, k_rope, k_nope[:, :2]), ValueError, r"^k_nope must be \(2, 4, 20, 8\)"),
        ((q, k_rope, k_nope[:, :, :5]), ValueError, "^k_nope must be"),
        ((q.long(), k_rope, k_nope), TypeError, "^q must be a floating-point tensor"),
        ((q, k_rope, k_nope.double()), TypeError, "^k_nope is torch.float64 but q"),
        ((q, k_rope.to("meta"), k_nope), ValueError, "^k_rope is on meta but q on cpu"),
        ((q, k_rope, k_nope.to("meta")), ValueError, "^k_nope is on meta but q on cpu"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            mla(*args)
    with pytest.raises(ValueError, match="positions"):
        mla(q, k_rope, k_nope, torch.arange(SEQ + 1))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "llama"}, "model_type 'llama' has no latent attention"),
        ({"qk_nope_head_dim": None}, "no qk_nope_head_dim"),
        ({"qk_nope_head_dim": 8.5}, "qk_nope_head_dim must be an int"),
        ({"qk_rope_head_dim": 7}, "qk_rope_head_dim must be even"),
        ({"rope_interleave": 0}, "rope_interleave must be true or false"),
        (
            {"rope_scaling": {"type": "linear", "factor": 2.0, "mscale_all_dim": 1.0}},
            "mscale_all_dim",
        ),
        ({"rope_scaling": {**YARN, "mscale_al_dim": 1.0}}, "mscale_al_dim"),
    ],
)
def test_bad_configs_raise_naming_the_key(changes, message):
    config = {
        "model_type": "deepseek_v3",
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "max_position_embeddings": 64,
        **changes,
    }
    with pytest.raises(ValueError, match=message):
        latent_rope_from_hf_config(config)
