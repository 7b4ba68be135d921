"""``posenc conform``: every bad input is one line on stderr and exit code 2, never a
traceback (issue 52), and a DeepSeek-V4 ``config.json`` prints a row per RoPE. The vLLM
and llama.cpp rows are left unrun here (their environments: ``make test-engines``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
         "max_position_embeddings": 4096}  # fmt: skip


@pytest.fixture
def run_conform(monkeypatch):
    """``posenc conform ARGS`` -> its exit code, with the engines of other environments
    unset (their rows say "not run")."""
    from posenc.cli.app import new_app, run
    from posenc.cli.conform import register

    for name in ("POSENC_VLLM_PYTHON", "POSENC_LLAMA_CPP"):
        monkeypatch.delenv(name, raising=False)
    app = new_app()
    register(app)
    return lambda *argv: run(app, ["conform", *map(str, argv)])


def _write(folder, **change):
    (folder / "config.json").write_text(json.dumps({**LLAMA, **change}))
    return folder


@pytest.mark.parametrize(
    ("change", "args", "message"),
    [
        ({}, ("--past", "1e15"), "past=1000000000000000.0 probes position 4.096e+18"),
        ({}, ("--past", "inf"), "past must be finite"),
        ({}, ("--past", "nan"), "past must be a number >= 1"),
        ({"max_position_embeddings": 0}, (), "max_position_embeddings must be >= 1, got 0"),
        ({"max_position_embeddings": "4096"}, (), "max_position_embeddings must be an int"),
        ({"num_attention_heads": 0}, (), "num_attention_heads must be >= 1, got 0"),
        ({"vocab_size": "x"}, (), "transformers' config class for model_type 'llama'"),
    ],
)
def test_each_bad_input_is_one_line(run_conform, tmp_path, capsys, change, args, message):
    assert run_conform(_write(tmp_path, **change), *args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert "Traceback" not in captured.err and captured.out == ""


def test_a_deepseek_v4_config_json_prints_its_two_ropes(run_conform, tmp_path, capsys, monkeypatch):
    from tests.hf.test_deepseek_v4 import FLAT

    monkeypatch.setenv("COLUMNS", "200")  # wide enough for a row per line (80: stacked)
    (tmp_path / "config.json").write_text(json.dumps(FLAT))
    assert run_conform(tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    hf = [line.split() for line in lines if "transformers" in line]
    assert [row[0] for row in hf] == ["main", "compress"]
    assert "DeepseekV4RotaryEmbedding" in hf[0][3] and hf[1][4] == "(yarn)"
    assert all(row[-2:] == ["-", "-"] for row in hf)  # no first position past fp32


def test_a_v4_config_json_posenc_cannot_read_is_one_line(run_conform, tmp_path, capsys):
    from tests.hf.test_deepseek_v4 import FLAT

    (tmp_path / "config.json").write_text(json.dumps({**FLAT, "partial_rotary_factor": 0.5}))
    assert run_conform(tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "qk_rope_head_dim=16 and partial_rotary_factor=0.5" in err[0]
