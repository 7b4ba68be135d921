"""``posenc conform``: posenc's float64 reading of a config against transformers' rotary
embedding of it, on the configs issue 43 names (Llama 3.1, Qwen2 with YaRN, Phi-3 with
LongRoPE, Gemma 3, DeepSeek-V3: ``tests/engines/configs.py``), and the comparison logic
on tables made wrong on purpose.

Tolerance: an engine whose angles ``p·θ`` are float32 products is within
:func:`~posenc.engines.compare.fp32_tolerance` of float64 (``2·|p·θ|·2^-24`` radians, a
few ulps more for cos, sin and the attention factor); a bfloat16 table, a wrong attention
factor or one pair's frequency is not."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.engines import ENGINES, conform, render_rows
from posenc.engines.compare import (
    compare_tables,
    fp32_tolerance,
    probe_positions,
    reference_tables,
)
from posenc.hf import rope_from_hf_config

pytest.importorskip("transformers")


from tests.engines.configs import NAMED

#: transformers alone (the vLLM rows: tests/engines/test_vllm.py)
HF = {"transformers": ENGINES["transformers"]}
#: the named configs but Qwen2.5-1M's dual chunks, which transformers does not read
PLAIN = sorted(set(NAMED) - {"qwen2.5-1m"})


@pytest.mark.parametrize("name", PLAIN)
def test_transformers_rotates_the_named_configs_as_posenc_reads_them(name, tmp_path):
    NAMED[name]().save_pretrained(tmp_path)
    rows = conform(tmp_path, engines=HF)
    assert rows and all(r.engine == "transformers" for r in rows)
    for r in rows:
        assert r.first_position is None, r  # within float32 of float64, past the context
        assert 0 < r.max_error < 0.05  # fp32 angles drift at 10^5 positions: never exact
    types = {r.layer_type for r in rows}
    assert types == ({"sliding_attention", "full_attention"} if name == "gemma3" else {None})
    if name == "phi3-longrope":  # short factors within the original length, long past it
        assert sorted(r.length for r in rows) == [4096, 262145]
    text = render_rows(rows)
    assert "transformers" in text and r.ran in text


def test_dual_chunk_attention_is_named_where_transformers_runs_plain_rope():
    (row,) = conform(NAMED["qwen2.5-1m"](), engines=HF)
    assert row.first_position == 262144 - 8192  # the first key past the first chunk
    assert row.differs_on.startswith("dual_chunk_attention_config")


def _tables(length=131072, pairs=8, base=10000.0):
    positions = probe_positions(length)
    config = {"model_type": "llama", "hidden_size": 2 * pairs, "num_attention_heads": 1}
    rope = rope_from_hf_config({**config, "rope_theta": base})
    return rope, positions, reference_tables(rope, positions), rope.inv_freq()


def test_float32_angles_pass_and_every_wrong_table_is_caught():
    _, positions, (cos, sin), inv_freq = _tables()
    angles32 = (positions.float().unsqueeze(-1) * inv_freq.float()).double()
    fp32 = compare_tables((angles32.cos(), angles32.sin()), (cos, sin), positions, inv_freq)
    assert fp32.first_position is None and fp32.max_error > 1e-4  # drifts, within the bound

    bf16 = compare_tables((cos.bfloat16(), sin.bfloat16()), (cos, sin), positions, inv_freq)
    assert bf16.first_position is not None and bf16.first_position <= 4

    factor = compare_tables((1.1 * cos, 1.1 * sin), (cos, sin), positions, inv_freq)
    assert factor.first_position == 0 and factor.differs_on.startswith("attention factor")

    wrong = inv_freq.clone()
    wrong[5:] *= 1.01  # a scaling that touches the low frequencies only
    angles = positions.double().unsqueeze(-1) * wrong
    pairs = compare_tables((angles.cos(), angles.sin()), (cos, sin), positions, inv_freq)
    assert pairs.differs_on == "frequencies of pairs 5-7"


def test_the_tolerance_is_float32s_bound_and_grows_with_the_angle():
    _, positions, (cos, sin), inv_freq = _tables()
    tol = fp32_tolerance(cos, sin, positions, inv_freq)
    assert tol[0] == pytest.approx(8 * 2.0**-24)
    far = positions[-1].item() * inv_freq.max().item()
    assert tol[-1] == pytest.approx(2 * far * 2.0**-24 + 8 * 2.0**-24)
    assert bool((tol[1:] >= tol[:-1]).all())


def test_probe_positions_reach_past_the_context_and_both_sides_of_each_edge():
    p = probe_positions(8192, past=4.0, also=(4096,)).tolist()
    assert p[:4] == [0, 1, 2, 3] and p[-1] == 32768
    assert {4095, 4096, 4097, 8191, 8192, 8193} <= set(p) and p == sorted(set(p))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="context"):
            probe_positions(bad)
    with pytest.raises(ValueError, match="past"):
        probe_positions(16, past=0.5)


def test_the_command_prints_the_table_and_errors_in_one_line(tmp_path, capsys):
    from posenc.cli.app import new_app, run
    from posenc.cli.conform import register

    app = new_app()
    register(app)
    NAMED["llama3.1"]().save_pretrained(tmp_path)
    assert run(app, ["conform", str(tmp_path), "--past", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "LlamaRotaryEmbedding (llama3)" in out and "196609" in out.split()  # 1.5 · 131072, + 1
    assert run(app, ["conform", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot read")
    with pytest.raises(TypeError, match="config must be"):
        conform({"model_type": "llama"})
    assert math.isfinite(conform(NAMED["llama3.1"](), engines=HF)[0].max_error)  # an object


def test_a_model_type_posenc_refuses_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "nanochat", "hidden_size": 64}')
    with pytest.raises(ValueError, match="nanochat"):
        conform(tmp_path)


def test_engine_tables_hold_one_value_per_pair():
    from posenc.engines.hf_engine import pair_tables

    x = torch.arange(6.0)
    half = torch.cat((x, x)), torch.cat((-x, -x))
    assert torch.equal(pair_tables(*half, 6)[0], x)
    inter = x.repeat_interleave(2), (-x).repeat_interleave(2)
    assert torch.equal(pair_tables(*inter, 6)[1], -x)
    assert torch.equal(pair_tables(x, -x, 6)[0], x)
    with pytest.raises(ValueError, match="neither"):
        pair_tables(torch.arange(12.0), torch.arange(12.0), 6)


def test_an_engine_that_fixes_a_dynamic_scalings_length_is_named():
    """Dynamic NTK computed once at ``max_position_embeddings · factor`` (as a static engine
    would) differs from transformers' below that length, and the row names the length."""
    import transformers

    config = transformers.Qwen2Config(
        hidden_size=64, num_attention_heads=2, max_position_embeddings=4096,
        rope_scaling={"rope_type": "dynamic", "factor": 4.0},
    )  # fmt: skip

    def fixed(config, jobs):
        return [(reference_tables(rope, p, 16384), "Fixed", p) for rope, p, _ in jobs]

    rows = conform(config, engines={"fixed": fixed})
    assert [r.length for r in rows] == [4096, 8193]
    for r in rows:
        assert r.first_position == 1
        assert r.differs_on == "dynamic: fixed at a 16384-token sequence, at every length"


def test_transformers_agrees_on_every_model_type_the_hf_tests_build():
    """The layer-plan families, Llama, Phi-3, GPT-NeoX and the composite configs of
    ``tests/hf/families.py`` (their per-layer-type RoPEs too, and Llama 4's complex
    tables): transformers rotates each as posenc reads it, to float32's rounding."""
    from tests.hf.families import CONFIGS, make

    for name in sorted(CONFIGS):
        rows = conform(make(name), engines=HF)
        assert rows, name
        assert all(r.first_position is None for r in rows), (name, rows)


def test_a_model_type_transformers_cannot_build_is_a_row(monkeypatch):
    import posenc.engines.hf_engine as hf_engine

    def refuse(config):
        raise ValueError("model_type 'llama': no single rotary embedding class ([])")

    monkeypatch.setattr(hf_engine, "rotary_class", refuse)
    (row,) = conform(NAMED["llama3.1"](), engines=HF)
    assert row.ran.startswith("not run: model_type 'llama'") and math.isnan(row.max_error)
    assert "not run: model_type" in render_rows([row])


def test_a_deepseek_v4_config_json_gives_a_row_per_rope(tmp_path):
    """Its RoPEs are labelled ``main`` and ``compress``, not by layer type: each is
    compared (the table was empty), and transformers turns each as posenc reads it."""
    import json

    from tests.hf.test_deepseek_v4 import FLAT

    (tmp_path / "config.json").write_text(json.dumps({**FLAT, "compress_ratios": [0, 4]}))
    rows = conform(tmp_path, engines=HF)
    assert [r.layer_type for r in rows] == ["main", "compress"]
    assert all(r.first_position is None and 0 < r.max_error < 1e-3 for r in rows), rows
    assert rows[0].ran.endswith("(default)") and rows[1].ran.endswith("(yarn)")


@pytest.mark.parametrize(
    ("past", "error", "match"),
    [
        (float("inf"), ValueError, "past must be finite"),
        (float("nan"), ValueError, "past must be a number >= 1"),
        (1e15, ValueError, r"past=1000000000000000.0 probes position .* beyond 2\*\*53"),
        ("2", ValueError, "past must be a number"),
        (True, ValueError, "past must be a number"),
        (0.5, ValueError, "past must be a number >= 1"),
    ],
)
def test_a_past_out_of_range_is_named(past, error, match):
    with pytest.raises(error, match=match):
        conform(NAMED["llama3.1"](), past=past, engines=HF)
    with pytest.raises(error, match=match):
        probe_positions(4096, past=past)


def test_the_largest_past_within_2_53_probes_there():
    p = probe_positions(4096, past=2.0**53 / 4096)
    assert p[-1].item() == 2**53


@pytest.mark.parametrize(
    ("engines", "error", "match"),
    [
        ([], TypeError, "engines must be a dict of name -> engine"),
        ("transformers", TypeError, "engines must be a dict"),
        ({}, ValueError, "engines must name at least one engine"),
        ({"transformers": None}, TypeError, "engines must map names"),
        ({1: ENGINES["transformers"]}, TypeError, "engines must map names"),
        ({"short": lambda config, jobs: []}, ValueError, r"engines\['short'\] must answer"),
        ({"none": lambda config, jobs: None}, ValueError, r"engines\['none'\] must answer"),
    ],
)
def test_bad_engines_are_named(engines, error, match):
    with pytest.raises(error, match=match):
        conform(NAMED["llama3.1"](), engines=engines)


def test_engines_none_is_every_engine(monkeypatch):
    """None is the documented default: :data:`ENGINES`, each answering every job."""
    import importlib

    module = importlib.import_module("posenc.engines.conform")  # the module, not the function
    ran = []
    fake = {"a": lambda config, jobs: ran.append("a") or ["not run: a"] * len(jobs)}
    monkeypatch.setattr(module, "ENGINES", fake)
    (row,) = conform(NAMED["llama3.1"](), engines=None)
    assert ran == ["a"] and row.engine == "a" and row.ran == "not run: a"


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"max_position_embeddings": 0}, ValueError, "max_position_embeddings must be >= 1"),
        ({"max_position_embeddings": "4096"}, TypeError, "max_position_embeddings must be an int"),
        ({"num_attention_heads": 0}, ValueError, "num_attention_heads must be >= 1"),
        ({"hidden_size": 64.0}, TypeError, "hidden_size must be an int"),
        ({"vocab_size": "x"}, ValueError, r"config.json'.*transformers' config class .*vocab_size"),
    ],
)
def test_a_bad_config_json_is_named(tmp_path, change, error, match):
    import json

    raw = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
           "max_position_embeddings": 4096, **change}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(error, match=match):
        conform(tmp_path, engines=HF)


def test_a_config_path_posenc_cannot_read_is_named(tmp_path):
    """conform names its parameter, config, where the path holds no config.json."""
    with pytest.raises(ValueError, match=r"cannot read config .*config\.json"):
        conform(tmp_path, engines=HF)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"config .*config\.json' is not a config"):
        conform(tmp_path, engines=HF)
    with pytest.raises(TypeError, match="config must be a transformers config object"):
        conform(1, engines=HF)


def test_a_config_objects_zero_context_is_named():
    import transformers

    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2)
    config.max_position_embeddings = 0  # a context of 4096 was compared in its place
    with pytest.raises(ValueError, match="max_position_embeddings must be >= 1"):
        conform(config, engines=HF)


@pytest.mark.parametrize("rows", [None, "rows", [1], [None], 3])
def test_render_rows_takes_conforms_rows_only(rows):
    with pytest.raises(TypeError, match="rows must be a list of ConformRow"):
        render_rows(rows)
    assert "engine" in render_rows([])  # no rows: the header
