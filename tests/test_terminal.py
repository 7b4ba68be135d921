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
        ("alibi", "CPU: [H, 2L - 1] distances; CUDA: none (flex)"),
        ("t5", "CPU: [H, 2L - 1] distances; CUDA: none (flex)"),  # shift-invariant, not fused
        ("fire", "CPU: [H, b, L] rows at a time; CUDA: none (flex), [H, L, L] bias to train"),
        ("shaw", "CPU: [H, b, L] blocks at a time; CUDA: none (flex)"),
    ],
)
def test_memory_cost_follows_the_kind_and_class(name, cost):
    assert memory_cost(name) == cost


def test_every_encoding_has_a_memory_cost():
    for name in posenc.available():
        assert memory_cost(name)


def test_encodings_table_has_one_row_per_encoding():
    table = encodings_table()
    headers = [column.header for column in table.columns]
    assert headers[:5] == ["name", "kind", "trainable", "relative", "runs past training length"]
    lines = render(table).splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    assert lines[rule - 1].split()[0] == "name"  # under the wrapped header's last line
    assert [line.split()[0] for line in lines[rule + 1 :]] == posenc.available()


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
