"""The package's shape: its layers, its import graph, its sizes, its package docstrings and
its registrations.

Every module under ``src/posenc`` is parsed with ``ast`` (nothing is imported); an import
may only reach its own layer or a layer below (:data:`LAYERS`, bottom to top; the tools
are ordered too, so ``plot`` importing ``arena`` fails as ``attn`` importing ``models``
does), and no two modules may import each other, directly or around a loop. Imports inside
functions count (a lazy import upward is still upward); imports under ``if TYPE_CHECKING:``
do not (they never run). ``posenc/__init__.py`` is the facade on top: it may import
anything and nothing may import it.

No module is over :data:`MAX_LINES` lines of code and no function (a ``def`` at any depth,
methods and nested functions included) over :data:`MAX_FUNCTION_LINES`; both count code
(:func:`code_lines`: docstrings, comments and blank lines apart), so prose never splits a
file,
except those named in :data:`LONG_MODULES` and :data:`LONG_FUNCTIONS`, each with its
reason; a named exception that is no longer needed fails too (:data:`STALE_EXCEPTIONS_FAIL`),
so the lists shrink.

A package docstring that names any of its modules (``:mod:`~posenc.hf.rope```) names every
one, so the list a reader trusts is complete.

The registration tests check that ``import posenc`` alone registers every encoding that a
module under ``additive/``, ``rotary/``, ``bias/`` (and ``nope.py``) defines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import pkgutil
import re
import subprocess
import sys
import tokenize
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

import posenc
from posenc.base import Encoding

#: the package as this checkout has it (found without importing it)
SRC = Path(__file__).resolve().parents[1] / "src" / "posenc"
FACADE = "posenc"

#: bottom to top; a module belongs to the first layer with a prefix that names it or a
#: package above it. Keep in step with docs/architecture.md (and the README's summary of it).
LAYERS: dict[str, tuple[str, ...]] = {
    # when values are read on the host, the checks of arguments, the machine (its record
    # and the choices measured on it): below everything
    "runtime": ("host_reads", "arguments", "system", "calibration"),
    "math": ("functional",),
    "core": ("registry", "config", "base", "positions", "encoding_info", "builder"),
    "encodings": ("additive", "rotary", "bias", "nope", "composite"),
    "attention": ("attn",),
    "models": ("models",),
    # the tools, each sub-layer using only those below it: what every tool shares (the
    # terminal's tables, docstrings read for people), then the tools
    # from the measurements up to the commands that run them all
    "tools.base": ("terminal", "docstrings", "describe"),
    "tools.bench": ("bench",),
    "tools.plot": ("plot",),
    "tools.hf": ("hf",),  # draws its report with plot; arena may read checkpoints with it
    "tools.engines": ("engines",),  # posenc's reading of a config against other engines'
    "tools.arena": ("arena",),  # trains and measures; draws with plot
    "tools.guide": ("guide",),  # cites an arena run's numbers
    "tools.demo": ("demo",),  # prints the tables, runs the arena
    "tools.cli": ("cli",),  # one subcommand per tool
    "tools.main": ("__main__",),
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
    assert not missing, (
        f"modules in no layer (add them to LAYERS and docs/architecture.md): {missing}"
    )


def test_the_tools_are_ordered_by_who_uses_whom():
    """The measurements under the arena, the arena under the guide, the commands on top."""
    order = ["describe", "bench", "plot", "hf", "arena", "guide", "demo", "cli", "__main__"]
    assert [rank(f"posenc.{name}") for name in order] == sorted(
        {rank(f"posenc.{name}") for name in order}
    )
    assert rank("posenc.terminal") == rank("posenc.docstrings") < rank("posenc.bench")
    assert rank("posenc.models") < rank("posenc.terminal")


def test_no_import_runs_upward():
    bad = upward(import_graph())
    lines = [f"{e}: {layer_of(e.importer)} imports {layer_of(e.target)}" for e in bad]
    assert not bad, "imports that run upward through the layers:\n" + "\n".join(lines)


def test_no_import_cycles():
    loops = cycles(import_graph())
    text = "\n\n".join("\n".join(str(e) for e in loop) for loop in loops)
    assert not loops, "modules that import each other:\n" + text


#: The architecture rule (docs/architecture.md): no module is over this many lines of code
#: (a package splits by concept instead; its docstrings and comments do not count)...
MAX_LINES = 300
#: ...and no function over this many, its docstring and comments left out (the code should
#: read in one screen; the arguments and shapes are read once, apart from it)
MAX_FUNCTION_LINES = 80

#: modules allowed over MAX_LINES: module -> why
LONG_MODULES: dict[str, str] = {}

#: functions allowed over MAX_FUNCTION_LINES: ``module.Class.function`` -> why
LONG_FUNCTIONS: dict[str, str] = {}

#: whether an exception above that is no longer needed (its module or function is gone, or
#: fits the limit now) fails the test; False turns that part into a warning
STALE_EXCEPTIONS_FAIL = True


def code_lines(source: str) -> set[int]:
    """The numbers of the lines of ``source`` that hold code: a token other than a comment,
    outside every docstring (a module's, a class's or a function's), so that prose is
    never what a size rule counts. A function that is only its docstring keeps its
    docstring's first line (it is the function's one statement)."""
    tree = ast.parse(source)
    prose: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        is_constant = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if is_constant and isinstance(first.value.value, str):
            end = first.end_lineno or first.lineno
            start = first.lineno + (1 if len(body) == 1 else 0)
            prose.update(range(start, end + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT}
    skipped |= {tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - prose


def module_sizes(root: Path = SRC) -> dict[str, int]:
    """Every module -> its number of code lines (:func:`code_lines`)."""
    return {
        m: len(code_lines(p.read_text(encoding="utf-8"))) for m, p in source_modules(root).items()
    }


def function_sizes(module: str, source: str) -> dict[str, int]:
    """Every function of ``source`` (the text of ``module``), at any depth, -> its number of
    code lines from ``def`` to its last line (:func:`code_lines`: its docstring and
    comments left out): ``module.f``, ``module.Class.method``, ``module.f.inner``."""
    sizes: dict[str, int] = {}
    code = code_lines(source)

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    span = range(child.lineno, (child.end_lineno or child.lineno) + 1)
                    sizes[name] = len(code.intersection(span))
                visit(child, name)
            else:
                visit(child, prefix)

    visit(ast.parse(source), module)
    return sizes


def all_function_sizes(root: Path = SRC) -> dict[str, int]:
    """:func:`function_sizes` of every module of the package."""
    sizes: dict[str, int] = {}
    for module, path in source_modules(root).items():
        sizes.update(function_sizes(module, path.read_text(encoding="utf-8")))
    return sizes


def over(sizes: dict[str, int], limit: int, exceptions: dict[str, str]) -> list[str]:
    """The entries of ``sizes`` over ``limit`` that ``exceptions`` does not name."""
    return [
        f"{name}: {n} lines" for name, n in sizes.items() if n > limit and name not in exceptions
    ]


def stale(sizes: dict[str, int], limit: int, exceptions: dict[str, str]) -> list[str]:
    """The entries of ``exceptions`` no longer needed: gone, or within ``limit``."""
    return [
        f"{name} ({why}): "
        + ("no such module or function" if name not in sizes else f"{sizes[name]} lines")
        for name, why in exceptions.items()
        if sizes.get(name, 0) <= limit
    ]


def _check_exceptions(
    sizes: dict[str, int], limit: int, exceptions: dict[str, str], what: str
) -> None:
    assert all(why.strip() for why in exceptions.values()), f"every exception of {what} says why"
    unneeded = stale(sizes, limit, exceptions)
    message = f"exceptions of {what} no longer needed (remove them):\n" + "\n".join(unneeded)
    if unneeded and STALE_EXCEPTIONS_FAIL:
        pytest.fail(message)
    if unneeded:
        warnings.warn(message, stacklevel=2)


def test_no_module_is_over_max_lines():
    long = over(module_sizes(), MAX_LINES, LONG_MODULES)
    assert not long, f"modules over {MAX_LINES} lines (split by concept):\n" + "\n".join(long)


def test_no_function_is_over_max_function_lines():
    long = over(all_function_sizes(), MAX_FUNCTION_LINES, LONG_FUNCTIONS)
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines (split into named steps, or add one to "
        "LONG_FUNCTIONS with the reason):\n" + "\n".join(long)
    )


def test_long_module_exceptions_are_still_needed():
    _check_exceptions(module_sizes(), MAX_LINES, LONG_MODULES, "LONG_MODULES")


def test_long_function_exceptions_are_still_needed():
    _check_exceptions(all_function_sizes(), MAX_FUNCTION_LINES, LONG_FUNCTIONS, "LONG_FUNCTIONS")


def test_function_sizes_count_every_def_at_any_depth():
    source = (
        'def d():\n    """Two lines\n    of docstring."""\n    return 1\n'
        "def f():\n    def inner():\n        pass\n    return inner\n"
        "class C:\n    async def m(self):\n\n        return 1\n"
        "if True:\n    def g(): pass\n"
        'def only():\n    """Just a\n    docstring."""\n'
        "def noted():\n    # a comment\n    x = (\n        1,\n    )  # trailing\n"
    )
    assert function_sizes("posenc.x", source) == {
        "posenc.x.d": 2,
        "posenc.x.f": 4,
        "posenc.x.f.inner": 2,
        "posenc.x.C.m": 2,
        "posenc.x.g": 1,
        "posenc.x.only": 2,
        "posenc.x.noted": 4,
    }
    module = '"""A module\ndocstring."""\n\n# a comment\nimport os\n\nclass K:\n    """Doc."""\n'
    assert sorted(code_lines(module)) == [5, 7, 8]
    sizes = {"a": 90, "b": 10, "c": 81}
    assert over(sizes, 80, {"c": "why"}) == ["a: 90 lines"]
    assert stale(sizes, 80, {"b": "why", "c": "why", "d": "why"}) == [
        "b (why): 10 lines",
        "d (why): no such module or function",
    ]


#: a cross-reference to a module in a docstring: ``:mod:`~posenc.hf.rope``` or ``:mod:`.encoding```
MOD_ROLE = re.compile(r":mod:`~?(?P<name>[\w.]+)`")

#: packages whose docstring lists some of its modules but not all: package -> why
INCOMPLETE_PACKAGE_DOCS: dict[str, str] = {}


def named_modules(package: str, doc: str) -> set[str]:
    """The modules that ``doc`` (the docstring of ``package``) names with ``:mod:``, as full
    names (``.x`` is ``package.x``)."""
    return {
        f"{package}{m['name']}" if m["name"].startswith(".") else m["name"]
        for m in MOD_ROLE.finditer(doc)
    }


def unlisted_modules(root: Path = SRC) -> dict[str, list[str]]:
    """Package -> the public modules directly in it that its docstring leaves out, for every
    package whose docstring names at least one of them."""
    modules = source_modules(root)
    missing = {}
    for package, path in modules.items():
        if path.name != "__init__.py":
            continue
        own = {
            m
            for m in modules
            if m.startswith(f"{package}.")
            and "." not in m[len(package) + 1 :]
            and not m[len(package) + 1 :].startswith("_")
        }
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        named = named_modules(package, doc)
        if named & own and own - named:
            missing[package] = sorted(own - named)
    return missing


def test_a_package_docstring_that_lists_modules_lists_them_all():
    missing = unlisted_modules()
    bad = [f"{p}: {m}" for p, m in missing.items() if p not in INCOMPLETE_PACKAGE_DOCS]
    assert not bad, (
        "package docstrings that name some of their modules but not these (add them, or "
        "drop the list):\n" + "\n".join(bad)
    )
    complete = [p for p in INCOMPLETE_PACKAGE_DOCS if p not in missing]
    message = "INCOMPLETE_PACKAGE_DOCS entries no longer needed: " + ", ".join(complete)
    if complete and STALE_EXCEPTIONS_FAIL:
        pytest.fail(message)
    if complete:
        warnings.warn(message, stacklevel=1)


def test_named_modules_reads_full_and_relative_names():
    doc = "See :mod:`~posenc.hf.rope`, :mod:`.keys` and :func:`posenc.hf.extend`."
    assert named_modules("posenc.hf", doc) == {"posenc.hf.rope", "posenc.hf.keys"}


def test_tests_mirror_the_packages():
    """Every package of ``src/posenc`` has its test folder, ``tests/<package>/`` (nested
    packages may share their parent's), as docs/architecture.md says."""
    tests = SRC.parents[1] / "tests"
    packages = [p.parent.relative_to(SRC) for p in SRC.glob("*/__init__.py")]
    missing = [str(p) for p in packages if not (tests / p).is_dir()]
    assert not missing, f"packages without a test folder: {missing}"


#: a cross-reference role in a docstring, with an optional title (``title <target>``)
XREF = re.compile(r":(?:func|class|mod|meth|attr|data|exc):`(?:[^`<]*<)?~?(?P<target>[\w.]+)>?`")


def resolves(name: str) -> bool:
    """Whether ``name`` (``posenc.x.y.Z.attr``) names a module, or an attribute of one
    (a dataclass field or an annotated attribute of a class counts)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for j, part in enumerate(parts[i:], start=i):
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif j == len(parts) - 1 and isinstance(obj, type):
                return any(part in getattr(c, "__annotations__", {}) for c in obj.__mro__)
            else:
                return False
        return True
    return False


def candidates(module: str, is_package: bool, target: str) -> list[str]:
    """The full names a docstring's ``target`` may mean: itself when it starts with
    ``posenc``; for a relative one (``.x``), ``x`` in the module, then in each package up
    from its own (Sphinx's search); none for a bare name (resolved by the reader's
    context, not here)."""
    if target.startswith(FACADE):
        return [target]
    if not target.startswith("."):
        return []
    names = [module + target]
    package = module if is_package else module.rpartition(".")[0]
    while package:
        names.append(package + target)
        package = package.rpartition(".")[0]
    return names


def broken_references(root: Path = SRC) -> list[str]:
    """``module: role`` for every cross-reference to posenc in a docstring of the package
    (a module's, a class's, a function's) that names nothing."""
    broken = []
    for module, path in source_modules(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        docs = [ast.get_docstring(node) or "" for node in ast.walk(tree) if isinstance(node, kinds)]
        for doc in docs:
            for match in XREF.finditer(doc):
                names = candidates(module, path.name == "__init__.py", match["target"])
                if names and not any(resolves(name) for name in names):
                    broken.append(f"{module}: {' '.join(match.group(0).split())}")
    return broken


def test_every_docstring_cross_reference_resolves():
    broken = broken_references()
    assert not broken, "cross-references that name nothing:\n" + "\n".join(broken)


def test_cross_references_resolve_as_sphinx_reads_them():
    assert resolves("posenc.attn.core.attention") and resolves("posenc.attn")
    assert resolves("posenc.models.TransformerLM.encoding")  # annotated on the class
    assert not resolves("posenc.attn.bias_plan.plan_plain")
    assert not resolves("posenc.attention.KVCache")  # the function, not a module
    assert candidates("posenc.hf.rope", False, ".keys") == [
        "posenc.hf.rope.keys",
        "posenc.hf.keys",
        "posenc.keys",
    ]
    assert candidates("posenc.hf", True, "~x") == []


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


def test_the_old_import_paths_still_work():
    """The paths the docs named before issue 39's moves: the planner's names, the checkpoint
    report and the layout tables (computed from the records)."""
    from posenc.attn import planner
    from posenc.attn.bias_plan import AttnShape, BiasPlan, plan_bias
    from posenc.hf import records
    from posenc.hf.checkpoint import inspect_checkpoint
    from posenc.hf.layouts import HALF, INTERLEAVED, LATENT_ATTENTION, MLA_BY_FLAG, REFUSED

    assert (AttnShape, BiasPlan, plan_bias) == (planner.AttnShape, planner.Plan, planner.plan)
    assert inspect_checkpoint is posenc.hf.inspect_checkpoint
    assert set(records.model_types(layout="half")) == HALF and "llama" in HALF
    assert "cohere" in INTERLEAVED and "deepseek_v3" in MLA_BY_FLAG & LATENT_ATTENTION
    assert "deepseek_v2" in LATENT_ATTENTION - MLA_BY_FLAG and "nanochat" in REFUSED
