"""``make test-engines``: the configs of ``tests/engines/configs.py`` through every engine,
vLLM's live (``POSENC_VLLM_PYTHON``) and llama.cpp's converter live (``POSENC_LLAMA_CPP``);
the table written into ``docs/engines.md`` between its markers, vLLM's answers recorded in
``tests/engines/data/vllm.json`` and the converter's GGUF metadata (of those configs and of
every model type the HF tests build) in ``tests/engines/data/gguf.json``, which
``make test`` replays (``tests/engines/test_vllm.py``, ``test_llama_cpp.py``) so the
comparison cannot rot.

    POSENC_VLLM_PYTHON=.venv-engines/bin/python POSENC_LLAMA_CPP=<llama.cpp source> \
        .venv/bin/python scripts/engines_table.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engines.configs import NAMED  # noqa: E402
from tests.hf.families import CONFIGS as FAMILIES  # noqa: E402
from tests.hf.families import make as make_family  # noqa: E402

from posenc.engines import ENGINES, conform, render_rows  # noqa: E402
from posenc.engines.llama_engine import gguf_metadata, metadata_tables  # noqa: E402
from posenc.engines.vllm_engine import read_answer, vllm_answers, vllm_python  # noqa: E402

RECORDED = ROOT / "tests" / "engines" / "data" / "vllm.json"
GGUF = ROOT / "tests" / "engines" / "data" / "gguf.json"
#: the llama-cpp-python whose vendored llama.cpp make test-engines unpacks (Makefile)
LLAMA_CPP_PYTHON = "0.3.36"
PAGE = ROOT / "docs" / "engines.md"
#: the page's tables one row per engine, whatever the terminal's width (render_rows stacks a
#: row under its engine where the columns do not fit: in the docs the block scrolls instead)
TABLE_COLUMNS = "200"
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
    gguf: dict[str, object] = {"versions": {"llama-cpp-python": LLAMA_CPP_PYTHON}, "configs": {}}
    sections = []
    for name, make in NAMED.items():
        answers: list[dict] = []

        def live(config, jobs, answers=answers):
            answers.extend(vllm_answers(config, jobs))
            return [read_answer(a) for a in answers]

        config = make()
        gguf["configs"][name] = found = gguf_metadata(config)  # type: ignore[index]

        def llama(config, jobs, found=found):
            return metadata_tables(found, jobs)

        engines = {"transformers": ENGINES["transformers"], "vllm": live, "llama.cpp": llama}
        rows = conform(config, engines=engines)
        recorded["configs"][name] = answers  # type: ignore[index]
        os.environ["COLUMNS"] = TABLE_COLUMNS
        sections.append(f"`{name}`:\n\n```text\n{render_rows(rows)}\n```\n")
    gguf["families"] = {name: gguf_metadata(make_family(name)) for name in sorted(FAMILIES)}
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps(recorded, separators=(",", ":")) + "\n")
    GGUF.write_text(json.dumps(gguf, separators=(",", ":")) + "\n")
    text = PAGE.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    v = recorded["versions"]
    made = (
        f"vLLM {v['vllm']} (torch {v['torch']}, transformers {v['transformers']}); "
        f"llama.cpp as vendored by llama-cpp-python {LLAMA_CPP_PYTHON}:\n\n"
    )  # type: ignore[index]
    PAGE.write_text(head + BEGIN + "\n" + made + "\n".join(sections) + END + tail)
    print(f"wrote {RECORDED.relative_to(ROOT)}, {GGUF.relative_to(ROOT)} and the table of "
          f"{PAGE.relative_to(ROOT)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
