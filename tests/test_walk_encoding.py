"""scripts/walk_encoding.py: following ``encoding`` through ``posenc.attention`` returns to a
file it has left at most 5 times, in the attention wing and in the whole package (issue 39
asked it of the wing, issue 53 of the package), on the first call and on the next ones.
A structural count, not a timing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "walk_encoding.py"
MAX_RETURNS = 5


def _script():
    spec = importlib.util.spec_from_file_location("walk_encoding", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


walk_encoding = _script()


@pytest.mark.parametrize("root", ["wing", "package"])
@pytest.mark.parametrize("name", list(walk_encoding.cases()))
def test_the_encoding_returns_to_a_file_at_most_five_times(name, root):
    where = walk_encoding.WING if root == "wing" else walk_encoding.SRC
    count, stops = walk_encoding.worst(name, where)
    assert stops[0] == "attn/core.py" and len(stops) >= 2  # the walk follows the call
    assert count <= MAX_RETURNS, " > ".join(stops)


def test_returns_counts_each_stop_in_a_file_left_before():
    assert walk_encoding.returns(["a", "b", "a", "c", "b", "a"]) == 3
    assert walk_encoding.returns(["a", "b", "c"]) == 0
