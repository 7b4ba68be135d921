"""The RoPE module: configuration, dtype safety, GQA, and KV-cache decoding."""

import pytest
import torch

import posenc
from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq
from posenc.models import TransformerLM


def rotation_tol(tol, *xs):
    """Two rotations of the same x by tables of the same angles, computed apart (a cos/sin
    may round otherwise in another vector lane): three roundings each of terms up to
    |x1| + |x2| <= 2·max|x|."""
    return tol(n=3, scale=2 * max(x.abs().max().item() for x in xs))


def test_module_equals_the_functions(tol):
    rope = posenc.create("rope", head_dim=16, base=500.0, layout="interleaved")
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16)  # GQA: 4 query, 2 kv heads
    q2, k2 = rope(q, k)
    inv_freq, _ = rope_inv_freq(16, 500.0)
    cos, sin = rope_cos_sin(torch.arange(6), inv_freq)
    rounding = rotation_tol(tol, q, k)
    torch.testing.assert_close(q2, apply_rope(q, cos, sin, "interleaved"), **rounding)
    torch.testing.assert_close(k2, apply_rope(k, cos, sin, "interleaved"), **rounding)


def test_decoding_layout_and_explicit_positions(tol):
    rope = posenc.create("rope", head_dim=8)
    q, k = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 5, 8)
    q2, k2 = rope(q, k)  # queries are the last two of five positions
    q3, _ = rope(q, q, positions=torch.tensor([3, 4]))
    rounding = rotation_tol(tol, q, k)
    torch.testing.assert_close(q2, q3, **rounding)
    torch.testing.assert_close(k2, rope(k, k)[1], **rounding)
    with pytest.raises(ValueError, match="pass k_positions"):
        rope(q, k, positions=torch.tensor([3, 4]))


def test_model_to_bfloat16_changes_nothing_but_the_output_rounding():
    scaling = {"rope_type": "linear", "factor": 4.0}
    rope = posenc.create("rope", head_dim=64, scaling=scaling)
    q = torch.randn(1, 2, 300, 64)
    expected = rope(q, q)[0]
    rope.to(torch.bfloat16)  # no buffer to round: frequencies come from the config
    torch.testing.assert_close(rope(q, q)[0], expected, rtol=0, atol=0)  # the same operations
    q_bf16 = q.bfloat16()
    # float32 math rounded once (DESIGN.md): the float32 result rounded, bit for bit
    assert torch.equal(rope(q_bf16, q_bf16)[0], rope(q_bf16.float(), q)[0].bfloat16())


def test_config_is_strict_and_never_guesses():
    with pytest.raises(ValueError, match="layout must be one of"):
        posenc.create("rope", head_dim=8, layout="neox")
    with pytest.raises(ValueError, match="head_dim must be even"):
        posenc.create("rope", head_dim=7)
    with pytest.raises(ValueError, match=r"rotary_dim \(16\) exceeds head_dim \(8\)"):
        posenc.create("rope", head_dim=8, rotary_dim=16)
    with pytest.raises(ValueError, match="rotary_dim=4 conflicts with partial_rotary_factor"):
        posenc.create("rope", head_dim=8, rotary_dim=4, partial_rotary_factor=0.25)
    with pytest.raises(ValueError, match=r"base=10000\.0 conflicts with scaling rope_theta=500000"):
        posenc.create("rope", head_dim=8, base=10000.0, scaling={"rope_theta": 500000.0})
    with pytest.raises(ValueError, match=r"unknown rope_type 'yarm'; accepted: \["):
        posenc.create("rope", head_dim=8, scaling={"rope_type": "yarm", "factor": 2.0})
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['beta'\].*'yarn'"):
        posenc.create(
            "rope",
            head_dim=8,
            scaling={
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "beta": 1,
            },
        )
    with pytest.raises(ValueError, match=r"missing required config key\(s\) \['factor'\]"):
        posenc.create("rope", head_dim=8, scaling={"rope_type": "linear"})
    with pytest.raises(ValueError, match="factor must be >= 1"):
        posenc.create("rope", head_dim=8, scaling={"rope_type": "linear", "factor": 0.5})


def test_hf_rope_parameters_are_accepted_verbatim():
    params = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    rope = posenc.create("rope", head_dim=128, scaling=params)
    assert rope.config.base == 500000.0
    assert rope.config.scaling.to_dict() == {k: v for k, v in params.items() if k != "rope_theta"}
    legacy = posenc.create("rope", head_dim=128, scaling={"type": "linear", "factor": 2.0})
    assert legacy.config.scaling.rope_type == "linear"
    partial = posenc.create("rope", head_dim=64, scaling={"partial_rotary_factor": 0.5})
    assert partial.config.rotary_dim == 32


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
        {"rope_type": "ntk", "factor": 4.0},
    ],
)
def test_kv_cache_generation_equals_recomputation(scaling, sharpen, model_tol):
    enc = {"name": "rope", "scaling": scaling}
    model = sharpen(TransformerLM(37, 32, 2, 4, encoding=enc, n_kv_heads=2))
    ids = torch.randint(0, 37, (2, 12))
    full = model(ids)
    cache = model.new_cache(2, 12)
    steps = [model(ids[:, :5], cache=cache)] + [
        model(ids[:, i : i + 1], cache=cache) for i in range(5, 12)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **model_tol(model, 12, full))
    # the check has teeth: other distances change the logits far beyond the tolerance (a
    # common shift would not: RoPE is relative)
    assert (model(ids, positions=torch.arange(0, 24, 2)) - full).abs().max() > 1e-2
    assert torch.equal(
        model.generate(ids[:, :5], 15), model.generate(ids[:, :5], 15, use_cache=False)
    )


def test_dynamic_ntk_with_a_kv_cache(sharpen, model_tol):
    """Dynamic NTK grows the base with the current length past the original one. Cached keys
    keep the rotation they were cached with (as in Hugging Face, issue #25104): below the
    original length cached decoding equals recomputation, past it the two differ."""
    enc = {
        "name": "rope",
        "scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 8},
    }
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding=enc))
    ids = torch.randint(0, 37, (1, 10))
    full = model(ids)
    cache = model.new_cache(1, 10)
    short = model(ids[:, :8], cache=cache)
    rounding = model_tol(model, 10, full)
    torch.testing.assert_close(short, model(ids[:, :8]), **rounding)
    rest = model(ids[:, 8:], cache=cache)  # length 10 > 8: new base for new tokens only
    assert (rest - full[:, 8:]).abs().max() > 10 * rounding["atol"]
    # the first 8 logits of the full pass already use the length-10 base
    assert (model(ids[:, :8]) - full[:, :8]).abs().max() > 10 * rounding["atol"]


@pytest.mark.parametrize("rope_type", ["ntk", "dynamic"])
def test_ntk_needs_more_than_one_pair(rope_type):
    scaling = {"rope_type": rope_type, "factor": 2.0, "original_max_position_embeddings": 4}
    if rope_type == "ntk":
        del scaling["original_max_position_embeddings"]
    with pytest.raises(ValueError, match="needs a rotary dimension > 2"):
        posenc.create("rope", head_dim=2, scaling=scaling)


def test_deepseek_mscale_zero_means_absent():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    plain = posenc.create("rope", head_dim=16, scaling=scaling)
    zero = posenc.create(
        "rope", head_dim=16, scaling={**scaling, "mscale": 1.0, "mscale_all_dim": 0}
    )
    assert zero.attention_factor() == plain.attention_factor()


def test_length_dependent_scaling_uses_one_length_for_queries_and_keys():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4}
    rope = posenc.create("rope", head_dim=8, scaling=scaling)
    q, k = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 8, 8)
    q2, k2 = rope(q, k, positions=torch.arange(4), k_positions=torch.arange(8))
    cos, sin = rope.rotation(torch.arange(8), seq_len=8)  # both at the length of the keys
    torch.testing.assert_close(q2, apply_rope(q, cos[:4], sin[:4]))
    torch.testing.assert_close(k2, apply_rope(k, cos, sin))
    with pytest.raises(ValueError, match="k_positions given without positions"):
        rope(q, k, k_positions=torch.arange(8))


DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}


@pytest.mark.parametrize(
    ("seq_len", "error"),
    [("a", TypeError), (True, TypeError), (1.5, TypeError), (0, ValueError), (-1, ValueError),
     (2**60, ValueError)],
)  # fmt: skip
@pytest.mark.parametrize("scaling", [None, DYNAMIC], ids=["default", "dynamic"])
def test_inv_freq_and_attention_factor_check_seq_len(scaling, seq_len, error):
    """Ignored by a plain RoPE, compared with a string inside dynamic NTK: named instead."""
    rope = posenc.create("rope", head_dim=8, scaling=scaling)
    with pytest.raises(error, match="seq_len"):
        rope.inv_freq(seq_len)
    with pytest.raises(error, match="seq_len"):
        rope.attention_factor(seq_len)


def test_a_length_as_long_as_positions_go_is_taken():
    rope = posenc.create("rope", head_dim=8, scaling=DYNAMIC)
    base = 10000.0 * ((2.0 * 2**40 / 16) - 1.0) ** (8 / 6)  # transformers' dynamic NTK
    expected = base ** -(torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    torch.testing.assert_close(rope.inv_freq(2**40), expected)


@pytest.mark.parametrize(("device", "error"), [(5, TypeError), ("nowhere", ValueError)])
def test_inv_freq_names_a_bad_device(device, error):
    with pytest.raises(error, match="device"):
        posenc.create("rope", head_dim=8).inv_freq(device=device)
