"""scripts/gpu_check.py: its dry run (the CPU, tiny shapes) writes every section with
numbers, so that the GPU check, which runs rarely, cannot rot. No timing is asserted."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
#: the timed sections, in order, and the columns every row of each holds
SECTIONS = {
    "copy": ("ms", "GB/s"),
    "rope": ("ms", "GB/s", "% copy"),
    "bias": ("ms", "x SDPA"),
    "syncs": ("forward reads", "train reads", "decode step reads"),
    "decode": ("steps",),
    "host": ("host µs", "call µs", "first_s"),
}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One ``python scripts/gpu_check.py OUT --dry-run``: (the finished process, OUT)."""
    out = tmp_path_factory.mktemp("gpu")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--dry-run"],
        cwd=tmp_path_factory.getbasetemp(),  # it finds the repository from its own path
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, out


def test_dry_run_exits_0_and_writes_json_and_markdown(dry_run):
    done, out = dry_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["pytest.txt", "results.json", "results.md"]
    result = json.loads((out / "results.json").read_text())
    assert result["dry_run"] is True and result["environment"]["device"] == "cpu"
    assert list(result["sections"]) == list(SECTIONS)
    text = (out / "results.md").read_text()
    assert text.startswith("# posenc GPU check: CPU") and "(dry run)" in text
    for heading in ("## Environment", "## Tests", "## Copy floor", "## RoPE", "## Decode step"):
        assert heading in text


def test_the_cuda_tests_ran_and_skipped(dry_run):
    """The pytest step ran ``tests/cuda`` (collected, every test skipped off CUDA) and the
    Triton kernels' tests (passed, under the interpreter)."""
    tests = json.loads((dry_run[1] / "results.json").read_text())["tests"]
    assert tests["returncode"] == 0, tests
    assert "-m 'cuda or triton' tests/cuda" in tests["command"]
    assert "tests/rotary/test_triton_kernel.py" in tests["command"]
    assert tests["summary"] and "skipped" in tests["summary"], tests
    assert " passed" in tests["summary"], tests
    assert "failed" not in tests["summary"] and "error" not in tests["summary"]


@pytest.mark.parametrize("name", list(SECTIONS))
def test_every_section_has_numbers(dry_run, name):
    section = json.loads((dry_run[1] / "results.json").read_text())["sections"][name]
    assert section["status"] == "ok", section
    timed = [row for row in section["rows"] if "skipped" not in row]
    assert timed, section
    for row in timed:
        assert "error" not in row, row
        for column in SECTIONS[name]:
            value = row.get(column)
            assert isinstance(value, (int, float)) and value >= 0, (column, row)


def test_decode_times_eager_and_counts_the_compiles(dry_run):
    section = json.loads((dry_run[1] / "results.json").read_text())["sections"]["decode"]
    eager, static, fused, hf, compiled, graphs = section["rows"]
    assert eager["mode"] == "eager" and eager["tokens/s"] > 0 and eager["ms"] > 0
    assert static["mode"] == "eager, static cache" and static["tokens = eager"]
    # RoPE + cache write in one Triton launch, under the interpreter here
    assert fused["mode"] == "eager, static cache, kernel='triton'" and fused["tokens = eager"]
    # dynamo's eager backend on the CPU; the step over a static cache compiles once
    assert compiled["mode"] == "torch.compile (eager, fullgraph), static cache"
    assert compiled["graphs"] == 1 and compiled["compile_s"] > 0 and compiled["tokens = eager"]
    # transformers' Llama of the same widths, eager: the peer's rate
    assert hf["mode"] == "transformers LlamaForCausalLM eager, DynamicCache"
    assert hf["steps"] == eager["steps"] and hf["tokens/s"] > 0
    # the CUDA graphs row (reduce-overhead on CUDA; dynamo's eager backend here): the steps
    # after the two that compile and record, the eager tokens
    assert graphs["mode"] == "torch.compile (eager), DecodeStep, static cache"
    assert graphs["steps"] >= 3 and graphs["tokens/s"] > 0 and graphs["tokens = eager"]


def test_host_times_the_calls_of_the_bench_case_eager_and_compiled(dry_run):
    """Every call of posenc bench --cases host, with its peer, eager; the first compiled
    ones; the ratio to the peer on posenc's rows; no GPU column on the CPU."""
    section = json.loads((dry_run[1] / "results.json").read_text())["sections"]["host"]
    rows = section["rows"]
    eager = {(r["call"], r["encoding"], r["impl"]) for r in rows if r["mode"] == "eager"}
    assert {
        ("enc(q, k)", "rope", "posenc"),
        ("enc(q, k)", "rope", "transformers rotary + apply"),
        ("attention", "none", "SDPA, causal"),
        ("attention", "none", "posenc"),
        ("attention", "alibi", "posenc"),
        ("attention", "t5", "posenc"),
        ("forward, 1 token", "rope", "posenc"),
        ("forward, 1 token", "alibi", "posenc"),
        ("forward, 1 token", "rope", "transformers Llama"),
        ("decode step", "rope", "posenc"),
        ("decode step", "alibi", "posenc"),
        ("decode step, static cache", "rope", "posenc"),
        ("decode step", "rope", "transformers Llama"),
    } <= eager
    compiled = [(r["call"], r["impl"]) for r in rows if r["mode"] == "compiled"]
    assert compiled[:2] == [("enc(q, k)", "posenc"), ("enc(q, k)", "transformers rotary + apply")]
    for row in rows:
        assert "GPU µs" not in row and "kernel µs" not in row, row  # CUDA only
        assert row["call µs"] >= row["host µs"] > 0, row
        has_peer = row["impl"] == "posenc" and (row["call"], row["mode"]) != (
            "decode step, static cache",
            "compiled",
        )
        if has_peer:
            peer = next(
                p
                for p in rows
                if p["impl"] != "posenc"
                and p["mode"] == row["mode"]
                and p["call"] == row["call"].removesuffix(", static cache")
            )
            assert row["x peer"] == pytest.approx(row["host µs"] / peer["host µs"]), row


def test_rope_rows_agree_with_posenc(dry_run):
    """Every RoPE implementation timed computes what posenc does (forward, up to the
    rounding of bf16 for transformers' bf16 tables)."""
    rows = json.loads((dry_run[1] / "results.json").read_text())["sections"]["rope"]["rows"]
    impls = {row["impl"] for row in rows}
    expected = {"posenc", "posenc under torch.compile", "transformers eager", "liger"}
    assert expected | {"posenc triton kernel", "posenc kernel='triton'"} <= impls
    for row in rows:
        # Liger's kernel with bf16 tables gives NaN at scattered elements under Triton
        # 3.9's interpreter (with float32 tables it does not): an interpreter matter, so
        # its bf16 row is checked on a GPU only
        interpreted = row["impl"] == "liger" and row["dtype"] == "bfloat16"
        if row.get("pass") == "fwd" and "ms" in row and not interpreted:
            assert row["max abs diff vs posenc"] < 0.05, row


def test_without_cuda_and_without_dry_run_it_says_so(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path / "out")]) == 2
    assert "--dry-run" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
