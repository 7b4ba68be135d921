"""vLLM's rotation against posenc's, on the configs of ``tests/engines/configs.py``.

``make test`` replays vLLM's answers recorded by ``make test-engines``
(``tests/engines/data/vllm.json``, from vLLM 0.32.0 on the CPU) through the comparison, so
the comparison logic and the published table cannot rot; the tests marked ``engines`` run
vLLM itself, where ``POSENC_VLLM_PYTHON`` names an environment with it: its ``get_rope``
on those configs, and its model files on tiny random models (``tests/engines/tiny.py``),
whose log-probabilities must be transformers'.

Expected: vLLM rotates every config as posenc reads it, to float32's rounding (gpt-oss's
unrounded YaRN and a stated YaRN attention factor included), except
Phi-3's LongRoPE below its original length (vLLM takes the long factors at every length
once ``max_model_len`` is past the original one; transformers switches by the current
length) and Qwen2.5-1M's dual chunk attention, whose vLLM rotary embedding wants a CUDA
device."""

from __future__ import annotations

import ast
import copy
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.engines import conform
from posenc.engines.llama_engine import LLAMA_CPP
from posenc.engines.vllm_engine import VLLM_PYTHON, read_answer

pytest.importorskip("transformers")
from tests.engines.configs import NAMED
from tests.engines.tiny import RUNS, build, logits, script, with_rules_tables

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm.json").read_text())


def replay(name):
    """An engine that answers with vLLM's recorded answers for ``name``, checking that the
    jobs are the ones recorded (else ``make test-engines`` must record them again)."""

    def engine(config, jobs):
        answers = RECORDED["configs"][name]
        assert len(answers) == len(jobs), "jobs changed: run make test-engines to record"
        for (_, positions, _), answer in zip(jobs, answers, strict=True):
            if "positions" in answer:
                ran = torch.tensor(answer["positions"])
                assert torch.equal(ran, positions[: ran.numel()]), "re-record: make test-engines"
        return [read_answer(a) for a in answers]

    return engine


def expect(name, rows):
    """The rows of ``name`` are what vLLM 0.32 does (the module's docstring)."""
    for r in rows:
        if name == "qwen2.5-1m":
            assert r.ran.startswith("not run: RuntimeError") and "accelerator" in r.ran
        elif name == "phi3-longrope" and r.length == 4096:  # within the original length
            assert r.first_position == 1
            assert r.differs_on == "longrope: fixed at a 131072-token sequence, at every length"
        else:
            assert r.first_position is None, r
            assert r.max_error < 0.02 and ", up to " in r.ran  # stops at max_model_len
            assert r.length <= NAMED[name]().max_position_embeddings


@pytest.mark.parametrize("name", sorted(NAMED))
def test_recorded_vllm_answers_compare_as_published(name):
    rows = conform(NAMED[name](), engines={"vllm": replay(name)})
    assert rows and {r.engine for r in rows} == {"vllm"}
    expect(name, rows)


def test_the_recording_says_what_made_it():
    assert RECORDED["versions"]["vllm"] == "0.32.0"
    assert set(RECORDED["configs"]) == set(NAMED)


@pytest.mark.parametrize("worker", ["vllm_worker.py", "gguf_worker.py"])
def test_the_workers_import_nothing_of_posenc(worker):
    """They run in an engine's environment, where posenc need not be installed."""
    source = (Path(__file__).parents[2] / "src/posenc/engines" / worker).read_text()
    names = [
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in getattr(node, "names", [])
    ]
    assert not [n for n in names if n.startswith("posenc")]
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(source)))


def test_without_vllm_the_row_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(VLLM_PYTHON, raising=False)
    rows = conform(NAMED["llama3.1"]())
    (vllm,) = [r for r in rows if r.engine == "vllm"]
    assert vllm.ran == f"not run: set {VLLM_PYTHON} (make test-engines builds vLLM)"


@pytest.mark.engines
@pytest.mark.skipif(not os.environ.get(VLLM_PYTHON), reason=f"needs {VLLM_PYTHON}")
@pytest.mark.parametrize("name", sorted(NAMED))
def test_live_vllm(name):
    rows = [r for r in conform(NAMED[name]()) if r.engine == "vllm"]
    expect(name, rows)


#: whether vLLM's log-probabilities are transformers', by the comparison of the rotations
#: (not: vLLM takes LongRoPE's long factors for a short prompt once ``max_model_len``
#: passes the original length); DeepSeek-V3 is left out: vLLM 0.32's CPU attention for
#: MLA takes no float32 weights ("expect weight to be bfloat16, float16, ...")
VLLM_AGREES = {run: run != "phi3-longrope-short" for run in RUNS if run != "deepseek-v3-yarn"}


@pytest.mark.engines
@pytest.mark.parametrize("run", sorted(VLLM_AGREES))
def test_vllm_logprobs(run, tmp_path):
    """vLLM's model file, not only its ``get_rope``: the log-probabilities of a tiny random
    model, float32 end to end, are transformers' (measured: 6e-6 of the largest, 11) where
    the rotations agree; ``1e-4`` of the largest is the bound. Leaving the scaling out
    (llama.cpp's rules' tables without it, so ``POSENC_LLAMA_CPP`` too) moves them by ten
    times that or more."""
    python = os.environ.get(VLLM_PYTHON)
    if not python or not os.environ.get(LLAMA_CPP):
        pytest.skip(f"needs {VLLM_PYTHON} and {LLAMA_CPP}")
    model, tokens = build(run)
    model.save_pretrained(tmp_path)
    request = {"model": str(tmp_path), "tokens": tokens, "n_ctx": RUNS[run][2],
               "vocab": model.config.vocab_size, "out": str(tmp_path / "logprobs.npy")}  # fmt: skip
    script(python, "vllm_logprobs.py", request)
    got = torch.from_numpy(np.load(tmp_path / "logprobs.npy"))

    def logprobs(model):
        return torch.log_softmax(logits(model, tokens), -1)[:-1]

    ref = logprobs(model)
    tol = 1e-4 * float(ref.abs().max())
    unscaled = with_rules_tables(copy.deepcopy(model), RUNS[run][2], unscaled=True)
    assert float((got - logprobs(unscaled)).abs().max()) > 10 * tol  # the scaling shows
    error = float((got - ref).abs().max())
    assert error <= tol if VLLM_AGREES[run] else error > 10 * tol
