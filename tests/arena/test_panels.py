"""posenc.arena.panels: the terminal tables of a run's numbers and the comparison of two runs."""

from __future__ import annotations

import copy

import pytest

from posenc.arena import panels as P
from posenc.arena.results import EXPERIMENTS, aggregate


def test_table_extrapolation(fake_results):
    text = P.table(fake_results, "extrapolation")
    assert "mode chunks" in text and "mode sliding" in text
    for label in ("64 (L)", "128 (2L)", "512 (8L)"):
        assert label in text
    rows = aggregate(fake_results["measurements"])
    alibi = next(
        r
        for r in rows
        if r["encoding"] == "alibi" and r.get("mode") == "sliding" and r["eval_length"] == 512
    )
    assert f"{alibi['mean']:.4g} ± {alibi['std']:.2g}" in text
    learned = next(line for line in text.splitlines() if "learned" in line)
    assert learned.count("cannot run") == 3
    assert "\x1b[" not in text  # no colour codes
    assert max(len(line) for line in text.splitlines()) <= 120


def test_table_every_experiment(fake_results):
    text = P.table(fake_results)
    for name in EXPERIMENTS:
        assert f"{name}:" in text
    assert "×4" in text  # context extension factors as columns
    assert "bidirectional" in text and "hf:sshleifer/tiny-gpt2" in text


def test_table_missing_and_unknown(fake_results):
    only = {**fake_results, "measurements": fake_results["measurements"][:1]}
    assert P.table(only, "lost-in-the-middle") == "no measurements for lost-in-the-middle\n"
    with pytest.raises(ValueError, match="unknown experiment"):
        P.table(fake_results, "extrapolate")


def test_compare(fake_results):
    b = copy.deepcopy(fake_results)
    for m in b["measurements"]:
        if m["encoding"] == "alibi" and m["value"] is not None:
            m["value"] *= 2
    b["measurements"] = [m for m in b["measurements"] if m["encoding"] != "sinusoidal"]
    b["measurements"].append(
        {"experiment": "extrapolation", "encoding": "fire", "seed": 0, "train_length": 64,
         "eval_length": 64, "metric": "perplexity", "value": 4.0, "mode": "sliding"}
    )  # fmt: skip
    text = P.compare(fake_results, b)
    alibi = [line for line in text.splitlines() if "encoding=alibi" in line and "│" in line]
    assert alibi and all("2.000" in line for line in alibi)
    rope = [line for line in text.splitlines() if "encoding=rope" in line and "│" in line]
    assert rope and all("1.000" in line for line in rope)
    only_a, only_b = text.split("only in A:")[1].split("only in B:")
    assert "encoding=sinusoidal" in only_a and "encoding=fire" not in only_a
    assert "encoding=fire" in only_b and "encoding=sinusoidal" not in only_b
    # sorted by the canonical experiment order
    firsts = [text.find(name) for name in EXPERIMENTS]
    assert firsts == sorted(firsts)
