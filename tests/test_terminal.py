"""posenc.terminal: the rich tables that the command and the demo print, and the console
they print on."""

import io

import pytest
from rich.table import Table

import posenc
from posenc.terminal import encodings_table, memory_cost, render, show


@pytest.mark.parametrize(
    ("name", "cost"),
    [
        ("nope", "none"),
        ("sinusoidal", "none (computed)"),
        ("scaled_sinusoidal", "none (computed; a few weights)"),  # one learned scale
        ("learned", "[L, d] learned table"),
        ("learned_2d", "[L, d] learned table"),  # bounded by its grid
        ("rope", "[L, d/2] cos/sin"),
        ("rope_mixed", "[H, L, d/2] cos/sin + learned weights"),
        ("fope", "[H, L, d/2] cos/sin + learned weights"),
        ("alibi", "[H, 2L - 1] distances (CPU), or none (flex, fused ALiBi)"),
        ("t5", "[H, 2L - 1] distances (CPU), or none (flex, fused ALiBi)"),  # shift_invariant
        ("fire", "[H, L, L] bias, or none (flex)"),
        ("shaw", "[H, L, L] scores, or [H, 64, L] blocks (CPU)"),  # adds_to_values
    ],
)
def test_memory_cost_follows_the_kind_and_class(name, cost):
    assert memory_cost(name) == cost


def test_every_encoding_has_a_memory_cost():
    for name in posenc.available():
        assert memory_cost(name)


def test_encodings_table_has_one_row_per_encoding():
    lines = render(encodings_table()).splitlines()
    assert lines[0].split()[:5] == ["name", "kind", "trainable", "relative", "extrapolates"]
    assert set(lines[1].strip()) == {"─"}  # the rule under the header
    assert [line.split()[0] for line in lines[2:]] == posenc.available()


def test_render_never_wraps_or_pads():
    table = Table("a", "b")
    table.add_row("x" * 300, "y")
    text = render(table)
    assert any(line.endswith("y │") for line in text.splitlines())  # one line, cell whole
    assert all(line == line.rstrip() for line in text.splitlines())
    assert text == text.strip("\n")


def test_show_is_plain_text_off_a_terminal():
    file = io.StringIO()
    show(encodings_table(), file)
    assert file.getvalue() == render(encodings_table()) + "\n"
    assert "\x1b[" not in file.getvalue()
