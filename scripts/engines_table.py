"""``make test-engines``: the configs of ``tests/engines/configs.py`` through every engine,
vLLM's live (``POSENC_VLLM_PYTHON``); the table written into ``docs/engines.md`` between
its markers, and vLLM's answers recorded in ``tests/engines/data/vllm.json``, which
``make test`` replays (``tests/engines/test_vllm.py``) so the comparison cannot rot.

    POSENC_VLLM_PYTHON=.venv-engines/bin/python .venv/bin/python scripts/engines_table.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engines.configs import NAMED  # noqa: E402

from posenc.engines import ENGINES, conform, render_rows  # noqa: E402
from posenc.engines.vllm_engine import read_answer, vllm_answers, vllm_python  # noqa: E402

RECORDED = ROOT / "tests" / "engines" / "data" / "vllm.json"
PAGE = ROOT / "docs" / "engines.md"
BEGIN, END = "<!-- conform-table: begin -->", "<!-- conform-table: end -->"


def versions(python: str) -> dict[str, str]:
    """vLLM's, its torch's and its transformers' versions, from its environment."""
    code = "import vllm, torch, transformers; print(vllm.__version__, torch.__version__, " \
        "transformers.__version__)"  # fmt: skip
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return dict(zip(("vllm", "torch", "transformers"), out.stdout.split()[-3:], strict=True))


def main() -> int:
    python = vllm_python()
    recorded: dict[str, object] = {"versions": versions(python), "configs": {}}
    sections = []
    for name, make in NAMED.items():
        answers: list[dict] = []

        def live(config, jobs, answers=answers):
            answers.extend(vllm_answers(config, jobs))
            return [read_answer(a) for a in answers]

        rows = conform(make(), engines={"transformers": ENGINES["transformers"], "vllm": live})
        recorded["configs"][name] = answers  # type: ignore[index]
        sections.append(f"`{name}`:\n\n```text\n{render_rows(rows)}\n```\n")
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps(recorded, separators=(",", ":")) + "\n")
    text = PAGE.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    v = recorded["versions"]
    made = f"vLLM {v['vllm']} (torch {v['torch']}, transformers {v['transformers']}):\n\n"  # type: ignore[index]
    PAGE.write_text(head + BEGIN + "\n" + made + "\n".join(sections) + END + tail)
    print(f"wrote {RECORDED.relative_to(ROOT)} and the table of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
