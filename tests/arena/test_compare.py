"""posenc.arena.reporting.compare: two runs side by side."""

from __future__ import annotations

import copy

from posenc.arena.experiments import EXPERIMENTS
from posenc.arena.reporting import compare as C


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
    text = C.compare(fake_results, b)
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


def test_describe():
    row = {"experiment": "extrapolation", "encoding": "rope", "seed": 0, "eval_length": 128,
           "metric": "perplexity", "mean": 5.0, "mode": "chunks"}  # fmt: skip
    text = C.describe(row)
    assert "experiment=" not in text and "mean=" not in text
    assert "encoding=rope" in text and "mode=chunks" in text
