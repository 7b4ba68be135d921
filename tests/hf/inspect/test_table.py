"""A layer plan as `posenc inspect` prints it: one row per kind of layer, its layers named
as a set that reads back to exactly those layers, no wider than the terminal (Llama 4's 48
layers and gpt-oss's long YaRN encoding at 80 columns)."""

import random
import re

import pytest

from posenc.hf import inspect_checkpoint, layer_plan, render_report
from posenc.hf.inspect.table import _COLUMNS, _UNSET, layer_set, plan_table
from posenc.models import LayerPlan

transformers = pytest.importorskip("transformers")


def _run(text):
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def expand(text, n_layers):
    """The layer indices ``text`` (a cell of the layers column) names: the inverse of
    layer_set, written from its docstring."""
    every = re.fullmatch(r"every (\d+)(?:st|nd|rd|th) from (\d+)(?: to (\d+))?", text)
    if every:
        step, first = int(every[1]), int(every[2])
        last = n_layers - 1 if every[3] is None else int(every[3])
        return list(range(first, last + 1, step))
    parts = text.split(", ")
    runs = [_run(p) for p in parts if p != "..."]
    if "..." in parts:  # the first run repeats every period up to the last one
        (a, b), (c, _), last = runs[0], runs[1], runs[-1]
        runs = [(s, s + b - a) for s in range(a, last[0], c - a)] + [last]
    return [i for first, last in runs for i in range(first, last + 1)]


def test_layer_set_names_each_set_in_a_few_words():
    assert layer_set(list(range(48)), 48) == "0-47"
    assert layer_set([3, 7, 11, 15], 16) == "every 4th from 3"
    assert layer_set([3, 7, 11, 15], 20) == "every 4th from 3 to 15"
    assert layer_set([0, 2, 4, 6, 8], 10) == "every 2nd from 0"
    assert layer_set([i for i in range(48) if i % 4 != 3], 48) == "0-2, 4-6, ..., 44-46"
    assert layer_set([0, 1, 5, 9], 12) == "0-1, 5, 9"
    assert layer_set([0, 1, 2, 5, 9, 10, 13, 20], 24) == "0-2, 5, 9-10, 13, 20"


def test_every_layer_set_reads_back_to_its_layers():
    """Random sets, periodic sets (a pattern of p layers, cut anywhere) and every s-th
    layer, each named and read back."""
    rng = random.Random(0)
    sets = []
    for _ in range(300):
        n = rng.randint(1, 64)
        sets.append((sorted(rng.sample(range(n), rng.randint(1, n))), n))
        period = rng.randint(2, 8)
        kept = set(rng.sample(range(period), rng.randint(1, period - 1)))
        periodic = [i for i in range(n) if i % period in kept]
        if periodic:
            sets.append((periodic, n))
        start, step = rng.randint(0, 5), rng.randint(2, 6)
        sets.append((list(range(start, start + step * rng.randint(1, 10), step)), start + 64))
    for indices, n in sets:
        assert expand(layer_set(indices, n), n) == indices, (indices, layer_set(indices, n))


def table_rows(lines, n_layers):
    """``{layer: (column -> cell)}`` read back from plan_table's lines (a plan of
    ``n_layers``), its legend's labels replaced by what they stand for; and the rows."""
    header = lines[0].split()
    starts = [lines[0].index(name) for name in header]
    legend, rows = {}, []
    for line in lines[2:]:
        if line.startswith("["):
            key, _, text = line.partition(" ")
            legend[key] = text
        elif line.startswith("    "):  # a legend entry wrapped
            legend[key] += " " + line.strip()
        else:
            ends = [*starts[1:], None]
            rows.append([line[s:e].strip() for s, e in zip(starts, ends, strict=True)])
    layers = {}
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        label = re.fullmatch(r"\w+ (\[\d+\])", cells["encoding"])
        if label:
            cells["encoding"] = legend[label[1]]
        for i in expand(cells.pop("layers"), n_layers):
            layers[i] = cells
    return layers, rows


def expected_cells(spec, shown):
    return {name: cell for name, cell in zip(_COLUMNS, spec.row(), strict=True) if name in shown}


@pytest.mark.parametrize(
    ("model_type", "kinds"), [("llama4", 2), ("gpt_oss", 2), ("cohere2", 2), ("gemma2", 2)]
)
def test_inspect_prints_one_row_per_kind_within_80_columns(tmp_path, model_type, kinds):
    """The default configs (Llama 4: 48 layers, NoPE every 4th, chunks; gpt-oss: 36 layers,
    its encoding 125 characters long): the table in the report is 80 columns at most, has
    one row per kind of layer, and every layer reads back as layer_plan gives it."""
    config = transformers.AutoConfig.for_model(model_type)
    config.save_pretrained(tmp_path)
    plan = layer_plan(config.get_text_config())
    lines = render_report(inspect_checkpoint(tmp_path), width=80)
    start = lines.index(f"layer plan ({len(plan)} layers):") + 1
    end = lines.index("build:")
    block = lines[start:end]
    assert all(len(line) <= 80 for line in block), max(block, key=len)
    assert all(line.startswith("    ") for line in block)
    layers, rows = table_rows([line[4:] for line in block], len(plan))
    assert len(rows) == kinds
    shown = lines[start].split()
    assert sorted(layers) == list(range(len(plan)))
    for i, spec in enumerate(plan):
        assert layers[i] == expected_cells(spec, shown), i
    # a column every layer leaves unset is left out, and one that some layer sets is shown
    for name, unset in _UNSET.items():
        assert (name in shown) == any(
            c != unset
            for spec in plan
            for n, c in zip(_COLUMNS, spec.row(), strict=True)
            if n == name
        )


def test_a_narrow_table_keeps_its_encodings_in_a_wrapped_legend():
    plan = LayerPlan.alternate(
        6, window=128, encoding={"name": "rope", "head_dim": 64, "base": 150000.0}
    )
    wide = plan_table(plan, width=200)
    narrow = plan_table(plan, width=30)
    assert "rope [1]" not in "\n".join(wide) and "rope [1]" in "\n".join(narrow)
    legend = [line for line in narrow if line.startswith(("[", "    "))]
    assert len(legend) > 1 and all(len(line) <= 30 for line in legend)  # wrapped
    assert table_rows(narrow, 6)[0] == table_rows(wide, 6)[0]
