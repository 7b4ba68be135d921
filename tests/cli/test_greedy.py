"""posenc.cli.greedy: options that take one or more values, as argparse's nargs="+"."""

import pytest

from posenc.cli.greedy import spread


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--seeds", "1", "2", "3"], ["--seeds", "1", "--seeds", "2", "--seeds", "3"]),
        (["--seeds", "1"], ["--seeds", "1"]),
        (["--seeds", "-1", "-2.5"], ["--seeds", "-1", "--seeds", "-2.5"]),  # numbers
        (["--seeds", "1", "--out", "x", "y"], ["--seeds", "1", "--out", "x", "y"]),
        (["--seeds"], ["--seeds"]),  # no value: click says so
        (["--seeds", "1", "--", "--seeds", "2"], ["--seeds", "1", "--", "--seeds", "2"]),
        (["all", "--other", "1", "2"], ["all", "--other", "1", "2"]),  # not a list option
    ],
)
def test_spread(args, expected):
    assert spread(args, ["--seeds"]) == expected
