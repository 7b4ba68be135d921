"""RoPE scalings: parity with transformers over a grid of configs, strictness, and properties.

transformers computes its frequencies in float32; posenc in float64. Cast to float32, they
agree to float32 precision; the attention factors are Python floats on both sides.
"""

import inspect
import itertools
import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional import ROPE_SCALINGS, rope_cos_sin, rope_inv_freq
from posenc.functional.rope import split_rope_parameters
from posenc.functional.rope_scaling import default_inv_freq

try:
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
except ImportError:  # the parity tests need the peer; the rest run without it
    transformers = None

needs_hf = pytest.mark.skipif(transformers is None, reason="transformers is not installed")

#: (head_dim, base, partial_rotary_factor): the head sizes of real models, 32 to 256
SHAPES = (
    (32, 10000.0, None),
    (64, 10000.0, 0.5),
    (80, 10000.0, None),
    (96, 10000.0, None),
    (96, 500000.0, 0.25),
    (128, 500000.0, None),
    (128, 1000000.0, 0.5),
    (256, 10000.0, None),
)
RTOL = 1e-6  # float32 pow/division in transformers: a few ulp


# --- the grid: (rope_type, head_dim, base, partial, params, max_positions, seq_len) ---


def longrope_factors(n, seed):
    rng = random.Random(seed)
    short = [round(1 + rng.random() * 0.2, 4) for _ in range(n)]
    long = sorted(round(1 + rng.random() * 60, 4) for _ in range(n))
    return short, long


def grid():
    for head_dim, base, partial in SHAPES:
        yield "default", head_dim, base, partial, {}, 2048, None
        for factor in (1.0, 2.0, 4.5, 64.0):
            yield "linear", head_dim, base, partial, {"factor": factor}, 2048, None
        for factor, seq_len in itertools.product(
            (1.0, 2.0, 16.0, 64.0), (None, 1000, 2048, 2049, 9000, 131072)
        ):
            yield "dynamic", head_dim, base, partial, {"factor": factor}, 2048, seq_len
        for factor, extra in itertools.product(
            (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 40.0, 64.0),
            (
                {},
                {"attention_factor": 0.9},
                {"mscale": 1.0, "mscale_all_dim": 1.0},  # DeepSeek-V3
                {"mscale": 0.707, "mscale_all_dim": 0.707},  # DeepSeek-V2
                {"mscale": 1.0, "mscale_all_dim": 0.8},
                {"truncate": False},
                {"beta_fast": 16.0, "beta_slow": 2.0},
            ),
        ):
            original = 4096
            params = {"factor": factor, "original_max_position_embeddings": original, **extra}
            yield "yarn", head_dim, base, partial, params, int(original * factor), None
        for factor, (low, high), original in itertools.product(
            (2.0, 8.0, 32.0), ((1.0, 4.0), (2.0, 8.0)), (512, 8192)
        ):
            params = {
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
            yield "llama3", head_dim, base, partial, params, int(original * factor), None
        rotary_dim = int(head_dim * (partial or 1))
        short, long = longrope_factors(rotary_dim // 2, seed=head_dim)
        for extra, seq_len in itertools.product(
            ({}, {"factor": 32.0}, {"attention_factor": 1.3}), (None, 4095, 4096, 4097, 131072)
        ):
            params = {
                "short_factor": short,
                "long_factor": long,
                "original_max_position_embeddings": 4096,
                **extra,
            }
            yield "longrope", head_dim, base, partial, params, 131072, seq_len
    for head_dim, partial, factor in itertools.product(
        (64, 128, 256), (None, 0.25, 0.5, 1.0), (1.0, 2.0, 8.0)
    ):
        yield "proportional", head_dim, 10000.0, partial, {"factor": factor}, 2048, None


CASES = list(grid())


def case_id(case):
    rope_type, head_dim, base, partial, params, _, seq_len = case
    short = {
        k: v for k, v in params.items() if not k.endswith("_factor") or k == "attention_factor"
    }
    return f"{rope_type}-d{head_dim}-b{base:g}-p{partial}-{short}-L{seq_len}"


def hf_config(head_dim, base, partial, rope_type, params, max_positions):
    rope_parameters = {"rope_type": rope_type, "rope_theta": base, **params}
    if partial is not None:
        rope_parameters["partial_rotary_factor"] = partial
    return transformers.LlamaConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        rope_parameters=rope_parameters,
    )


def hf_frequencies(rope_type, config, seq_len):
    if rope_type == "default":
        # Llama's default ignores partial_rotary_factor; Phi-3's (the same math) honours it
        from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

        return Phi3RotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len)


def posenc_frequencies(rope_type, head_dim, base, partial, params, max_positions, seq_len):
    """posenc's record holds what transformers reads from the top level of the config."""
    params = dict(params)
    if rope_type == "dynamic":  # transformers' original length is max_position_embeddings
        params["original_max_position_embeddings"] = max_positions
    if rope_type == "longrope" and "factor" not in params:
        params["factor"] = max_positions / params["original_max_position_embeddings"]
    rotary_dim = int(head_dim * partial) if partial is not None else None
    scaling = {"rope_type": rope_type, **params}
    return rope_inv_freq(head_dim, base, scaling, seq_len, rotary_dim=rotary_dim)


@needs_hf
def test_every_transformers_rope_type_is_known():
    missing = sorted(set(ROPE_INIT_FUNCTIONS) - set(ROPE_SCALINGS))
    assert not missing, f"transformers has rope types posenc lacks: {missing}"


@needs_hf
@pytest.mark.parametrize(
    "rope_type", ["default", *sorted(ROPE_INIT_FUNCTIONS)] if transformers else []
)
def test_grid_covers_every_type(rope_type):
    assert sum(case[0] == rope_type for case in CASES) >= 8


@needs_hf
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_transformers(case):
    rope_type, head_dim, base, partial, params, max_positions, seq_len = case
    expected, expected_factor = hf_frequencies(
        rope_type, hf_config(head_dim, base, partial, rope_type, params, max_positions), seq_len
    )
    inv_freq, attention_factor = posenc_frequencies(*case)
    assert inv_freq.dtype == torch.float64
    scale = expected.double().abs()
    if rope_type in ("yarn", "llama3"):
        # a blend of θ and θ/factor, which float32 rounds relative to θ, not to the result
        rotary_dim = int(head_dim * (partial or 1))
        scale = default_inv_freq(rotary_dim, base)
    error = (inv_freq.float().double() - expected.double()).abs()
    worst = int((error / scale).argmax())
    assert torch.all(error <= RTOL * scale), (worst, inv_freq[worst].item(), expected[worst].item())
    assert attention_factor == pytest.approx(expected_factor, rel=1e-12)


# --- strictness ---


@pytest.mark.parametrize(
    "scaling, key",
    [
        ({"rope_type": "linear", "factor": 2.0, "bogus": 1}, "bogus"),
        (
            {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "mscal": 1.0,
            },
            "mscal",
        ),
        ({"rope_type": "default", "factor": 2.0}, "factor"),
        ({"rope_type": "ntk-by-parts", "factor": 2.0}, "ntk-by-parts"),
    ],
)
def test_unknown_type_or_key_is_named(scaling, key):
    with pytest.raises(ValueError, match=key):
        rope_inv_freq(64, 10000.0, scaling)


@pytest.mark.parametrize(
    "scaling, key",
    [
        ({"rope_type": "linear"}, "factor"),
        ({"rope_type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        (
            {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
            "low_freq_factor",
        ),
        (
            {
                "rope_type": "longrope",
                "long_factor": [1.0] * 32,
                "original_max_position_embeddings": 8,
            },
            "short_factor",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 32,
                "long_factor": [1.0] * 32,
                "original_max_position_embeddings": 8,
            },
            "factor",
        ),
    ],
)
def test_missing_required_key_is_named(scaling, key):
    with pytest.raises(ValueError, match=key):
        rope_inv_freq(64, 10000.0, scaling)


def test_longrope_factor_count_must_match_pairs():
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 16,
        "long_factor": [1.0] * 16,
        "original_max_position_embeddings": 8,
        "factor": 4.0,
    }
    with pytest.raises(ValueError, match="32 pairs"):
        rope_inv_freq(64, 10000.0, scaling)


# --- properties ---

head_dims = st.integers(2, 128).map(lambda n: 2 * n)
factors = st.floats(1.0, 64.0)
bases = st.floats(100.0, 1e7)


@given(
    head_dim=head_dims,
    base=bases,
    factor=factors,
    positions=st.lists(st.integers(0, 100_000), min_size=1, max_size=8),
)
def test_linear_is_default_at_positions_over_factor(head_dim, base, factor, positions):
    """Position interpolation: rotating position p with factor f is rotating p / f unscaled."""
    positions = torch.tensor(positions, dtype=torch.float64)
    linear, _ = rope_inv_freq(head_dim, base, {"rope_type": "linear", "factor": factor})
    default, _ = rope_inv_freq(head_dim, base)
    cos, sin = rope_cos_sin(positions, linear)
    cos_ref, sin_ref = rope_cos_sin(positions / factor, default)
    torch.testing.assert_close(cos, cos_ref, rtol=0, atol=1e-9)
    torch.testing.assert_close(sin, sin_ref, rtol=0, atol=1e-9)


@given(
    head_dim=head_dims,
    base=bases,
    factor=factors,
    original=st.integers(1, 1 << 20),
    fraction=st.floats(0.0, 1.0),
)
def test_dynamic_is_default_up_to_the_original_length(head_dim, base, factor, original, fraction):
    seq_len = max(1, round(fraction * original))
    scaling = {
        "rope_type": "dynamic",
        "factor": factor,
        "original_max_position_embeddings": original,
    }
    dynamic, attention_factor = rope_inv_freq(head_dim, base, scaling, seq_len)
    torch.testing.assert_close(dynamic, rope_inv_freq(head_dim, base)[0], rtol=1e-12, atol=0)
    assert attention_factor == 1.0


@given(
    head_dim=head_dims,
    base=bases,
    factor=factors,
    original=st.integers(16, 1 << 20),
    truncate=st.booleans(),
)
def test_yarn_lies_between_interpolation_and_default(head_dim, base, factor, original, truncate):
    scaling = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": original,
        "truncate": truncate,
    }
    yarn, _ = rope_inv_freq(head_dim, base, scaling)
    default, _ = rope_inv_freq(head_dim, base)
    assert torch.all(yarn >= default / factor * (1 - 1e-12))
    assert torch.all(yarn <= default * (1 + 1e-12))
    # the fastest pair is extrapolated, the slowest interpolated, when the ramp allows it
    assert torch.all(yarn[1:] <= yarn[:-1])


@given(head_dim=head_dims, base=bases, factor=factors, partial=st.sampled_from([None, 0.5]))
def test_ntk_scales_the_base(head_dim, base, factor, partial):
    """NTK-aware: base' = base · factor^(d/(d-2)), so the first pair keeps its frequency and
    the last is interpolated by exactly ``factor``."""
    rotary_dim = head_dim if partial is None else max(2, int(head_dim * partial) // 2 * 2)
    if rotary_dim < 4:
        return  # d/(d-2) needs d > 2
    ntk, attention_factor = rope_inv_freq(
        head_dim, base, {"rope_type": "ntk", "factor": factor}, rotary_dim=rotary_dim
    )
    new_base = base * factor ** (rotary_dim / (rotary_dim - 2))
    torch.testing.assert_close(ntk, default_inv_freq(rotary_dim, new_base), rtol=1e-12, atol=0)
    default = default_inv_freq(rotary_dim, base)
    assert ntk[0] == default[0] == 1.0
    assert float(ntk[-1]) == pytest.approx(float(default[-1]) / factor, rel=1e-12)
    assert attention_factor == 1.0


def test_yarn_temperature_matches_the_paper():
    """sqrt(1/t) = 0.1·ln(s) + 1: 1.208 at s = 8 (Peng et al. 2023)."""
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}
    _, attention_factor = rope_inv_freq(128, 10000.0, scaling)
    assert attention_factor == pytest.approx(0.1 * math.log(8) + 1)
    assert round(attention_factor, 3) == 1.208


# --- the registry: plain functions of one signature ---


@pytest.mark.parametrize("rope_type", sorted(ROPE_SCALINGS))
def test_every_scaling_function_has_the_one_signature(rope_type):
    params = list(inspect.signature(ROPE_SCALINGS[rope_type]).parameters.values())
    leading = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert leading == ["head_dim", "rotary_dim", "base", "seq_len", "device"]
    assert all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)


def test_scaling_functions_take_plain_arguments():
    inv_freq, factor = ROPE_SCALINGS["linear"](16, 16, 100.0, factor=4.0)
    torch.testing.assert_close(inv_freq, default_inv_freq(16, 100.0) / 4.0, rtol=0, atol=0)
    assert factor == 1.0


def test_rope_parameters_split_legacy_type_and_encoding_keys():
    rope_type, params, encoding_keys = split_rope_parameters(
        {"type": "yarn", "factor": 2.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5}
    )
    assert (rope_type, params) == ("yarn", {"factor": 2.0})
    assert encoding_keys == {"rope_theta": 1e6, "partial_rotary_factor": 0.5}
    assert split_rope_parameters(None) == ("default", {}, {})
    with pytest.raises(ValueError, match="type='linear' and rope_type='ntk'"):
        split_rope_parameters({"type": "linear", "rope_type": "ntk"})
    with pytest.raises(TypeError, match="dict"):
        split_rope_parameters([("rope_type", "linear")])
