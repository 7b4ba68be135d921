"""Documented examples are executed: every ```python block of the README and of the docs
site's pages, every ``posenc ...`` line of their shell blocks, and every docstring example.

A page's blocks run in order in a scratch folder (its cwd), each python block in a fresh
namespace, so a block may use a file an earlier one wrote (a config.json for
``posenc inspect``). ``posenc`` lines run through :func:`posenc.cli.main` and must exit 0;
``make``, ``pip``, ``pytest`` and ``torchrun`` lines are not run. The commands that take
minutes or hours, or need what only such a run makes, are in :data:`NOT_RUN` with the
reason. The generated encoding pages' examples are ``posenc.describe.example``, run by its
own tests.
"""

import contextlib
import doctest
import importlib
import io
import pkgutil
import re
import shlex
from pathlib import Path

import pytest

import posenc

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"```(python|sh|bash|console)\n(.*?)```", re.S)

#: documented commands that are not run here, each with the reason
NOT_RUN = {
    "posenc arena run all --preset quick": "the quick preset takes about 8 minutes",
    "posenc arena run extrapolation --encodings rope alibi --corpus my_texts/": (
        "the quick preset on a reader's own text folder: minutes, and no such folder here"
    ),
    "posenc arena run all --preset full --out runs/full": "the full preset takes hours",
    "posenc arena run lost-in-the-middle --preset quick": (
        "about 11 minutes (tests/arena/test_lost_in_the_middle.py trains its recipe, slow)"
    ),
    "posenc arena run all --preset standard --out runs/standard": (
        "the standard preset takes about 45 minutes; docs/results/standard/ is its run"
    ),
    "posenc arena report docs/results/standard --figures docs/results/standard/figures": (
        "rewrites the published report and figures in the source tree"
    ),
    "posenc arena run all --preset full --device cuda --bf16 --out runs/full-gpu": (
        "needs a GPU and hours (tests/arena/test_device.py runs --bf16 on the CPU, tiny)"
    ),
    "posenc arena run extrapolation --preset standard --encodings nope rope alibi p_rope fope "
    "pope fox cope": "24 models of the standard preset, about 15 minutes; docs/results/research/",
    "posenc arena run layer-plans --preset standard": (
        "21 four-layer models of the standard preset, about 15 minutes; docs/results/plans/"
    ),
    "posenc arena run length-generalization --preset standard --encodings nope rope alibi "
    "--positions randomized --positions pose": (
        "42 task models of the standard preset, about 25 minutes; docs/results/samplers/"
    ),
    "posenc bench --size small": (
        "about 10 minutes on two cores (tests/bench/test_bench.py runs tiny)"
    ),
    "posenc bench --size small --cases patterns --out /tmp/bench-patterns2": (
        "about 4 minutes, compiling flex kernels (tests/bench/test_bench.py runs it tiny)"
    ),
    "posenc bench --size small --cases rolling --out /tmp/bench-rolling": (
        "a benchmark run whose numbers the page shows (tests/bench/test_bench.py runs it tiny)"
    ),
}


def blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of every python and shell block of ``path``, in order."""
    return [
        ("python" if lang == "python" else "sh", code)
        for lang, code in BLOCK.findall(path.read_text())
    ]


def commands(code: str) -> list[str]:
    """The ``posenc`` lines of a shell block, comments removed."""
    lines = (shlex.join(shlex.split(line, comments=True)) for line in code.splitlines())
    return [line for line in lines if line.startswith("posenc ")]


def run_command(line: str) -> None:
    """Run one ``posenc ...`` line in-process; fail with its output unless it exits 0."""
    from posenc import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(shlex.split(line)[1:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    assert code == 0, f"{line!r} exited {code}:\n{out.getvalue()}\n{err.getvalue()}"


def run_page(path: Path) -> None:
    """Every block of ``path`` in order, in the current folder."""
    for index, (lang, code) in enumerate(blocks(path)):
        if lang == "python":
            exec(compile(code, f"{path.name}[{index}]", "exec"), {"__name__": "__docs__"})
            continue
        for line in commands(code):
            if line not in NOT_RUN:
                run_command(line)


def readme_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(readme_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_example_runs(index):
    exec(compile(readme_blocks()[index], f"README.md[{index}]", "exec"), {})


def test_readme_commands_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = [line for lang, code in blocks(README) if lang == "sh" for line in commands(code)]
    assert lines
    for line in lines:
        if line not in NOT_RUN:
            run_command(line)


def test_not_run_lists_only_documented_commands():
    documented = {
        line
        for path in (README, *PAGES)
        for lang, code in blocks(path)
        if lang == "sh"
        for line in commands(code)
    }
    assert set(NOT_RUN) <= documented, set(NOT_RUN) - documented


def test_docs_pages_exist():
    names = {p.name for p in PAGES}
    assert {"index.md", "guide.md", "figures.md", "huggingface.md", "arena.md"} <= names
    assert {"adding-an-encoding.md", "bring-your-own-attention.md"} <= names


#: the arena page trains every experiment at the tiny preset, as ``tests/arena/test_run.py``
#: does (10 s on idle cores): its commands run in ``make test-slow``
SLOW_PAGES = ("arena.md",)


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p for p in PAGES],
    ids=lambda p: p.name,
)
def test_docs_page_runs(page, tmp_path, monkeypatch):
    if page.name in ("huggingface.md", "engines.md"):
        pytest.importorskip("transformers")
    if page.name == "compile-and-export.md":
        pytest.importorskip("onnxruntime")  # a test dependency (the dev extra), not posenc's
    monkeypatch.chdir(tmp_path)
    # a page may register an example encoding (adding-an-encoding.md): keep it out of the
    # registry the other tests of this process see
    monkeypatch.setattr(posenc.registry, "_REGISTRY", dict(posenc.registry._REGISTRY))
    run_page(page)


MODULES = sorted(m.name for m in pkgutil.walk_packages(posenc.__path__, "posenc."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
