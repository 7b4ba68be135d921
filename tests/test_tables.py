"""posenc.tables: the plain-text tables that the command and the demo print."""

import posenc
from posenc.tables import config_table, encodings_table, format_table


def test_format_table_aligns_columns_under_a_rule():
    text = format_table(("a", "long header"), [(1, "x"), ("wide cell", 2.5)])
    assert text.splitlines() == [
        "a          long header",
        "---------  -----------",
        "1          x",
        "wide cell  2.5",
    ]


def test_encodings_table_has_one_row_per_encoding():
    lines = encodings_table().splitlines()
    assert lines[0].split() == ["name", "kind", "trainable", "relative", "extrapolates", "summary"]
    assert [line.split()[0] for line in lines[2:]] == posenc.available()


def test_config_table_of_an_encoding_without_keys():
    assert config_table("nope") == "(none)"
    assert config_table("learned").splitlines()[0].split() == ["key", "type", "default"]
