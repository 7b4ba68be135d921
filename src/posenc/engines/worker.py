"""Running an engine's worker script: one JSON request on its stdin, one JSON answer on
its stdout, in whichever Python has the engine (:mod:`~posenc.engines.vllm_worker`,
:mod:`~posenc.engines.gguf_worker`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["TIMEOUT_S", "EngineUnavailable", "run_worker"]

#: how long a worker may take (importing vLLM alone takes ~15 s on 2 cores)
TIMEOUT_S = 600


class EngineUnavailable(RuntimeError):
    """An engine that cannot run here, and why (the table shows the reason)."""


def run_worker(python: str, script: str, request: dict[str, Any], cwd: str, engine: str) -> Any:
    """The answer of ``script`` (a file beside this one) run by ``python`` on ``request``.

    Raises:
        EngineUnavailable: the worker failed as a whole (its last line of stderr says why).
    """
    worker = Path(__file__).with_name(script)
    done = subprocess.run(
        [python, str(worker)], input=json.dumps(request), capture_output=True, text=True,
        timeout=TIMEOUT_S, cwd=cwd, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EngineUnavailable(f"not run: {engine}'s worker failed: {last}")
    return json.loads(done.stdout)
