"""posenc.terminal: the rich tables that the command and the demo print, and the console
they print on."""

import io

import pytest
from rich.cells import cell_len
from rich.table import Table

import posenc
from posenc.terminal import (
    RUNS_PAST,
    Fitted,
    columns,
    encodings_table,
    markdown_text,
    memory_cost,
    papers_table,
    render,
    show,
)


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
    assert headers == ["name", "kind", "trainable", "relative", RUNS_PAST, "memory cost"]
    lines = render(table, 80).splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    assert lines[rule - 1].split()[0] == "name"  # under the wrapped header's last line
    firsts = [line.split()[0] for line in lines[rule + 1 :] if line[:1].strip()]
    assert firsts == posenc.available()  # each row's first line starts with its name


def test_papers_table_has_the_extra_columns_and_every_paper():
    extra = {"measured": {"rope": "×3.1 (no)"}}
    text = render(papers_table(extra), 80)
    lines = text.splitlines()
    assert lines[0].split() == ["name", "measured", "paper"]
    assert max(cell_len(line) for line in lines) <= 80
    flat = " ".join(text.split())
    for name in posenc.available():  # the paper wrapped, never cut
        assert " ".join(posenc.info(name).reference.split()) in flat
    rope = next(line for line in lines if line.split()[:1] == ["rope"])
    assert rope.split()[1:3] == ["×3.1", "(no)"]


@pytest.mark.parametrize(("value", "width"), [(None, 80), ("100", 100), ("0", 80), ("x", 80)])
def test_columns_is_COLUMNS_else_80(monkeypatch, value, width):
    if value is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", value)
    assert columns() == width


def test_render_wraps_to_the_width_and_never_cuts_or_pads():
    table = Table("a", "b")
    table.add_row("x " * 150, "y")
    for width in (40, 80):
        text = render(table, width)
        lines = text.splitlines()
        assert max(cell_len(line) for line in lines) <= width
        assert "…" not in text and text.count("x") == 150  # wrapped, every word kept
        assert all(line == line.rstrip() for line in lines)
        assert text == text.strip("\n")
    for bad, error in ((0, ValueError), (80.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="width"):
            render(table, bad)


def test_show_is_plain_text_off_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    file = io.StringIO()
    show(encodings_table(), file)
    assert file.getvalue() == render(encodings_table(), 60) + "\n"
    assert "\x1b[" not in file.getvalue()
    assert max(cell_len(line) for line in file.getvalue().splitlines()) <= 60


HEADERS = ["engine", "length", "ran"]
ROWS = [["transformers", "4096", "LlamaRotaryEmbedding (llama3), " * 3], ["vllm", "8", "-"]]


def test_fitted_is_a_row_per_line_where_its_prose_has_room():
    text = render(Fitted(HEADERS, ROWS, prose=("ran",)), 80)
    lines = text.splitlines()
    assert lines[0].split() == HEADERS
    assert lines[2].split()[:3] == ["transformers", "4096", "LlamaRotaryEmbedding"]
    assert max(cell_len(line) for line in lines) <= 80
    assert " ".join(ROWS[0][2].split()) in " ".join(text.split())  # wrapped, whole


def test_fitted_stacks_each_row_where_its_prose_has_no_room():
    # 12 + 4 fixed columns, 3 x 3 between cells and 24 for "ran": 49 > 40
    text = render(Fitted(HEADERS, ROWS, prose=("ran",)), 40)
    assert max(cell_len(line) for line in text.splitlines()) <= 40
    assert text.splitlines()[0].split() == ["engine"]
    blocks = [block.split() for block in text.split("\n\n")]
    assert blocks[0][-len(ROWS[0][2].split()) - 1 :] == ["ran:", *ROWS[0][2].split()]
    assert "transformers" in blocks[0] and blocks[0][-9:-7] == ["length:", "4096"]
    assert blocks[1][-4:] == ["length:", "8", "ran:", "-"]
    key = render(Fitted(HEADERS, ROWS, prose=("ran",), key=1), 40)
    assert key.splitlines()[0].split() == ["length"]  # the key column named
    with pytest.raises(ValueError, match="rows"):
        Fitted(HEADERS, [["vllm", "8"]], prose=())
    with pytest.raises(ValueError, match="key"):
        Fitted(HEADERS, ROWS, prose=(), key=3)


MARKDOWN = """# a report

A paragraph long enough to be wrapped at forty columns, at spaces only.

| dtype | layout | posenc | transformers |
|---|---|---|---|
| float32 | half | 86 µs (11.06x) | 41 µs (5.23x) |

- a bullet long enough to be wrapped, its lines after the first indented
"""


def test_markdown_text_wraps_paragraphs_and_fits_tables():
    text = markdown_text(MARKDOWN, 40)
    lines = text.splitlines()
    assert max(cell_len(line) for line in lines) <= 40
    assert lines[:2] == ["# a report", ""]
    assert lines[2:4] == [
        "A paragraph long enough to be wrapped at",
        "forty columns, at spaces only.",
    ]
    assert lines[-2:] == [
        "- a bullet long enough to be wrapped,",
        "  its lines after the first indented",
    ]
    # stacked: 4 columns of 7 + 6 + 14 + 13 and 3 x 4 between them do not fit 40
    stacked = [line.strip() for line in lines[5:10]]
    assert stacked[0] == "dtype" and stacked[2].split() == ["float32", "layout:", "half"]
    assert stacked[3:5] == ["posenc: 86 µs (11.06x)", "transformers: 41 µs (5.23x)"]
    wide = markdown_text(MARKDOWN, 80).splitlines()
    row = next(line for line in wide if line.split()[:1] == ["float32"])
    assert row.split() == ["float32", "half", "86", "µs", "(11.06x)", "41", "µs", "(5.23x)"]
    assert text.endswith("\n") and not markdown_text("a").endswith("\n")
