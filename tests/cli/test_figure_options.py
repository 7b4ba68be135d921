"""posenc.cli.figure_options: a figure function's parameters as options."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from posenc.cli.figure_options import arg_docs, convert_item, figure_options


def figure(
    count: int,
    ratio: float | None = None,
    both: int | float = 1,
    where: str | Path = "x",
    shape: tuple[int, int, int] = (1, 2, 3),
    heads: Sequence[int] | None = None,
    mixed: Sequence[str | Mapping[str, Any] | tuple[str, int]] = ("a",),
    rest: tuple[int, ...] = (),
    opaque: Any = None,
) -> None:
    """Draw.

    Args:
        count: how many
            things, on two lines.
        ratio: a ratio.

    Raises:
        ValueError: never.
    """


def test_figure_options_map_each_type():
    options = {o.name: o for o in figure_options(figure)}
    assert list(options) == ["count", "ratio", "both", "where", "shape", "heads", "mixed", "rest"]
    assert options["count"].required and options["count"].annotation is int
    assert options["count"].help == "how many things, on two lines."
    assert options["ratio"].annotation is float and not options["ratio"].required
    assert options["ratio"].help == "a ratio."  # a default of None is not shown
    assert options["both"].annotation is float  # the widest of int | float
    assert options["where"].annotation is str
    assert options["shape"].annotation == tuple[int, int, int]
    assert options["heads"].annotation == list[str] and options["heads"].members == (int,)
    assert options["mixed"].members == (str, Mapping[str, Any])  # the tuple form is left out
    assert options["rest"].members == (int,)
    assert options["shape"].flag == "--shape"


def test_arg_docs_stops_at_the_next_section():
    assert arg_docs(figure.__doc__) == {
        "count": "how many things, on two lines.",
        "ratio": "a ratio.",
    }
    assert arg_docs(None) == {}


@pytest.mark.parametrize(
    ("text", "members", "value"),
    [
        ("3", (int,), 3),
        ("3", (str,), "3"),
        ("2.5", (int, float), 2.5),
        ("none", (Mapping[str, Any], type(None)), None),
        ('{"a": 1}', (Mapping[str, Any], type(None)), {"a": 1}),
        ("linear", (str, Mapping[str, Any]), "linear"),
    ],
)
def test_convert_item(text, members, value):
    assert convert_item(text, members, "--x") == value


def test_convert_item_errors_name_the_option():
    with pytest.raises(ValueError, match="--x takes values of type int, got 'a'"):
        convert_item("a", (int,), "--x")
    with pytest.raises(ValueError, match=r"--y: '\{a' is not a JSON object"):
        convert_item("{a", (Mapping[str, Any],), "--y")
