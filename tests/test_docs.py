"""Documented examples are executed: the README's Python blocks and every docstring example."""

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import posenc

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(readme_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_example_runs(index):
    exec(compile(readme_blocks()[index], f"README.md[{index}]", "exec"), {})


MODULES = sorted(m.name for m in pkgutil.walk_packages(posenc.__path__, "posenc."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
