"""The package's shape: its layers, its import graph, its modules' size and its registrations.

Every module under ``src/posenc`` is parsed with ``ast`` (nothing is imported); an import
may only reach its own layer or a layer below, and no two modules may import each other,
directly or around a loop. Imports inside functions count (a lazy import upward is still
upward); imports under ``if TYPE_CHECKING:`` do not (they never run). ``posenc/__init__.py``
is the facade on top: it may import anything and nothing may import it.
No module is over 300 lines (a package splits by concept instead).

The registration tests check that ``import posenc`` alone registers every encoding that a
module under ``additive/``, ``rotary/``, ``bias/`` (and ``nope.py``) defines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

import posenc
from posenc.base import Encoding

SRC = Path(posenc.__file__).resolve().parent
FACADE = "posenc"

#: bottom to top; a module belongs to the first layer with a prefix that names it or a
#: package above it. Keep in step with the README's architecture section.
LAYERS: dict[str, tuple[str, ...]] = {
    "math": ("functional",),
    "core": ("registry", "config", "base", "positions", "encoding_info", "builder"),
    "encodings": ("additive", "rotary", "bias", "nope", "composite"),
    "attention": ("attn",),
    "models": ("models",),
    "tools": (
        "hf",
        "cli",
        "demo",
        "bench",
        "tables",
        "__main__",
        "arena",
        "plot",
        "describe",
        "guide",
    ),
}


class Import(NamedTuple):
    """One import statement: who imports, the module it reaches, where it is written."""

    importer: str
    target: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} `{self.text}` -> {self.target}"


def layer_of(module: str) -> str | None:
    """The layer of ``module`` (``"facade"`` for ``posenc`` itself), or None if it has none."""
    if module == FACADE:
        return "facade"
    head = module.split(".")[1]
    for layer, prefixes in LAYERS.items():
        if head in prefixes:
            return layer
    return None


def rank(module: str) -> int:
    """The height of ``module``'s layer: 0 for math, the highest for the facade (-1: none)."""
    layer = layer_of(module)
    return -1 if layer is None else [*LAYERS, "facade"].index(layer)


def source_modules(root: Path = SRC) -> dict[str, Path]:
    """Every module of the package, ``posenc.x.y`` -> its file (``__init__.py`` for a package)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in ``tree``, at any depth, except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _statements(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _statements(node)


def _known(name: str, modules: set[str]) -> str:
    """``name`` if it is a module, else the closest package above it that is."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str, source: str, is_package: bool, modules: set[str]) -> list[Import]:
    """The imports of package modules in ``source`` (the text of ``module``), each resolved
    to the module it loads: ``from . import x`` reaches ``x`` when ``x`` is a module and the
    package otherwise; ``from .a import f`` reaches ``a``."""
    found = []
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in _statements(ast.parse(source)):
        text = ast.unparse(node)
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        for name in dict.fromkeys(names):
            if name == FACADE or name.startswith(FACADE + "."):
                target = _known(name, modules)
                if target != module:
                    found.append(Import(module, target, node.lineno, text))
    return found


def import_graph(root: Path = SRC) -> list[Import]:
    """Every import between modules of the package."""
    files = source_modules(root)
    edges = []
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges += imports_of(module, path.read_text(), is_package, set(files))
    return edges


def upward(edges: list[Import]) -> list[Import]:
    """The imports that reach a higher layer than the importer's (the facade may import all)."""
    return [e for e in edges if e.importer != FACADE and rank(e.target) > rank(e.importer) >= 0]


def cycles(edges: list[Import]) -> list[list[Import]]:
    """One loop of imports through each strongly connected group of modules (Tarjan)."""
    graph: dict[str, list[Import]] = {}
    for e in edges:
        graph.setdefault(e.importer, []).append(e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for e in graph.get(v, []):
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    loops = []
    for group in groups:
        start = min(group)
        paths = {start: []}  # breadth first, within the group, back to start
        queue = [start]
        loop = None
        while queue and loop is None:
            v = queue.pop(0)
            for e in graph[v]:
                if e.target == start:
                    loop = [*paths[v], e]
                    break
                if e.target in group and e.target not in paths:
                    paths[e.target] = [*paths[v], e]
                    queue.append(e.target)
        loops.append(loop)
    return loops


def test_every_module_has_a_layer():
    missing = [m for m in source_modules() if layer_of(m) is None]
    assert not missing, f"modules in no layer (add them to LAYERS and the README): {missing}"


def test_no_import_runs_upward():
    bad = upward(import_graph())
    lines = [f"{e}: {layer_of(e.importer)} imports {layer_of(e.target)}" for e in bad]
    assert not bad, "imports that run upward through the layers:\n" + "\n".join(lines)


def test_no_import_cycles():
    loops = cycles(import_graph())
    text = "\n\n".join("\n".join(str(e) for e in loop) for loop in loops)
    assert not loops, "modules that import each other:\n" + text


#: The README's architecture rule: no module is over this many lines.
MAX_LINES = 300


def test_no_module_is_over_max_lines():
    sizes = {
        m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in source_modules().items()
    }
    long = [f"{m}: {n} lines" for m, n in sizes.items() if n > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split by concept):\n" + "\n".join(long)


def _graph_of(sources: dict[str, str], tmp_path: Path) -> list[Import]:
    for name, text in sources.items():
        path = tmp_path.joinpath(*name.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(tmp_path / "posenc")


def test_the_walker_sees_lazy_imports_skips_type_checking_and_finds_loops(tmp_path):
    edges = _graph_of(
        {
            "posenc/__init__.py": "from .base import Encoding\n",
            "posenc/info.py": "",
            "posenc/base.py": "from .registry import info\nfrom . import info as i\n",
            "posenc/registry.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .base import Encoding\n"
                "else:\n    import posenc.info\n"
                "def f():\n    from .base import Encoding\n"
            ),
            "posenc/functional/__init__.py": "from .rope import f\n",
            "posenc/functional/rope.py": "from ..config import check\nfrom .. import __version__\n",
            "posenc/config.py": "",
        },
        tmp_path,
    )
    assert {(e.importer, e.target, e.line) for e in edges} == {
        ("posenc", "posenc.base", 1),
        ("posenc.base", "posenc.registry", 1),
        ("posenc.base", "posenc.info", 2),
        ("posenc.registry", "posenc.info", 5),
        ("posenc.registry", "posenc.base", 7),
        ("posenc.functional", "posenc.functional.rope", 1),
        ("posenc.functional.rope", "posenc.config", 1),
        ("posenc.functional.rope", "posenc", 2),
    }
    assert [(e.importer, e.target) for e in upward(edges)] == [
        ("posenc.functional.rope", "posenc.config"),
        ("posenc.functional.rope", "posenc"),
    ]
    (loop,) = cycles(edges)
    assert [(e.importer, e.target) for e in loop] == [
        ("posenc.base", "posenc.registry"),
        ("posenc.registry", "posenc.base"),
    ]
    assert str(loop[1]) == "posenc.registry:7 `from .base import Encoding` -> posenc.base"


def encoding_modules() -> list[str]:
    """Every module that may define an encoding: under additive/, rotary/, bias/, and nope."""
    names = ["posenc.nope"]
    for package in (posenc.additive, posenc.rotary, posenc.bias):
        prefix = package.__name__ + "."
        names += [m.name for m in pkgutil.walk_packages(package.__path__, prefix)]
    return names


def _registered_after(code: str) -> set[str]:
    """The names registered in a fresh interpreter after it runs ``code``."""
    run = f"{code}\nimport json, posenc\nprint(json.dumps(posenc.available()))"
    out = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_import_posenc_registers_what_every_encoding_module_registers():
    every = "import importlib\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in encoding_modules()
    )
    assert _registered_after("import posenc") == _registered_after(every)


@pytest.mark.parametrize("module", encoding_modules())
def test_every_encoding_class_is_registered(module):
    """A public, non-abstract ``Encoding`` subclass is an encoding; bases meant only for
    subclassing have a leading underscore."""
    defined = [
        cls
        for name, cls in vars(importlib.import_module(module)).items()
        if inspect.isclass(cls)
        and issubclass(cls, Encoding)
        and cls.__module__ == module
        and not name.startswith("_")
        and not inspect.isabstract(cls)
    ]
    registered = {posenc.registry.get(name) for name in posenc.available()}
    missing = [cls.__name__ for cls in defined if cls not in registered]
    assert not missing, f"{module} defines encodings that are not registered: {missing}"
