"""RoPE scaling records: each one's fields are its pure function's keyword arguments, and a
record computes what its ``rope_parameters`` dict computes."""

import dataclasses
import inspect

import pytest
import torch

from posenc.functional import ROPE_SCALINGS, rope_inv_freq
from posenc.functional.rope_scaling import scaling_keys
from posenc.rotary.scaling import SCALING_CONFIGS, ScalingConfig, parse_scaling

EXAMPLES = {
    "default": {},
    "linear": {"factor": 2.0},
    "ntk": {"factor": 2.0},
    "dynamic": {"factor": 2.0, "original_max_position_embeddings": 16},
    "ntk_alpha": {"alpha": 1000.0},
    "ntk_mixed": {"factor": 4.0, "mixed_b": 0.5},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 8.0},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    "longrope": {
        "short_factor": [1.0, 1.5, 2.0, 2.5],
        "long_factor": [3.0, 4.0, 5.0, 6.0],
        "original_max_position_embeddings": 16,
        "factor": 8.0,
    },
    "proportional": {"factor": 2.0},
}


def test_every_scaling_has_a_record_and_an_example():
    assert set(SCALING_CONFIGS) == set(ROPE_SCALINGS) == set(EXAMPLES)


@pytest.mark.parametrize("rope_type", sorted(ROPE_SCALINGS))
def test_record_fields_are_the_function_keywords(rope_type):
    record = SCALING_CONFIGS[rope_type]
    assert record.rope_type == rope_type
    assert record.encoding_name == f"rope scaling {rope_type!r}"
    fields = {f.name: f.default for f in dataclasses.fields(record)}
    _, accepted = scaling_keys(rope_type)
    assert list(fields) == accepted
    # where the function has a default, the record has the same one
    for p in inspect.signature(ROPE_SCALINGS[rope_type]).parameters.values():
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty:
            assert fields[p.name] == p.default, p.name


@pytest.mark.parametrize("rope_type", sorted(ROPE_SCALINGS))
@pytest.mark.parametrize("seq_len", [None, 8, 64])
def test_record_computes_what_its_dict_computes(rope_type, seq_len):
    scaling = {"rope_type": rope_type, **EXAMPLES[rope_type]}
    record, encoding_keys = parse_scaling(scaling)
    assert isinstance(record, ScalingConfig) and encoding_keys == {}
    head_dim, rotary_dim = 16, 8
    expected = rope_inv_freq(head_dim, 500.0, scaling, seq_len, rotary_dim=rotary_dim)
    for got in (
        record.inv_freq(head_dim, rotary_dim, 500.0, seq_len),
        rope_inv_freq(head_dim, 500.0, record, seq_len, rotary_dim=rotary_dim),
    ):
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
        assert got[1] == expected[1]


def test_parse_scaling_splits_encoding_keys_and_reads_legacy_type():
    record, encoding_keys = parse_scaling(
        {"type": "linear", "factor": 2.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5}
    )
    assert record == SCALING_CONFIGS["linear"](factor=2.0)
    assert encoding_keys == {"rope_theta": 1e6, "partial_rotary_factor": 0.5}
    assert parse_scaling(record) == (record, {})


@pytest.mark.parametrize(
    "scaling, match",
    [
        ({"rope_type": "linear", "factor": 0.5}, "factor"),
        (
            {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 0.5,
            },
            "beta_fast",
        ),
        ({"type": "linear", "rope_type": "ntk", "factor": 2.0}, "type"),
        ({"rope_type": "bogus"}, "bogus"),
    ],
)
def test_records_check_values(scaling, match):
    with pytest.raises(ValueError, match=match):
        parse_scaling(scaling)
