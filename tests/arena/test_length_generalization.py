"""length-generalization end to end on the tiny preset, and exact match checked on a model
that is forced to be right."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from posenc.arena.evaluate import task_accuracy
from posenc.arena.experiments import length_generalization as lg
from posenc.arena.presets import TINY
from posenc.arena.runner import RunContext
from posenc.arena.tasks import IGNORE, SEQUENCE_VOCAB, sequence_batch


class Oracle(nn.Module):
    """Logits that put all their mass on given targets (a model that is always right)."""

    def __init__(self, targets: torch.Tensor, vocab: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.targets, self.vocab = targets, vocab

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        right = self.targets.clamp(min=0)  # IGNORE rows: any token
        return nn.functional.one_hot(right, self.vocab).float() + self.weight


def test_task_accuracy_of_an_oracle_is_one_and_one_wrong_token_fails_its_row() -> None:
    batch = sequence_batch("reverse", 8, 3, 6, torch.Generator().manual_seed(0))
    assert task_accuracy(Oracle(batch.targets, SEQUENCE_VOCAB), batch) == 1.0
    wrong = batch.targets.clone()
    col = int((wrong[2] != IGNORE).nonzero()[-1])  # the EOS of row 2
    wrong[2, col] = (wrong[2, col] + 1) % SEQUENCE_VOCAB
    assert task_accuracy(Oracle(wrong, SEQUENCE_VOCAB), batch) == 7 / 8
    # the padding of shorter rows is never scored, whatever the model says there
    assert (batch.targets == IGNORE).any(dim=1).sum() > 0


def test_tiny_run(tmp_path: Path) -> None:
    ctx = RunContext(TINY, tmp_path)
    lg.run(ctx)
    records = ctx.measurements
    lengths = lg.eval_lengths(ctx)
    assert lengths == [4, 5, 6]
    encodings = list(TINY.encodings or ())
    assert len(records) == 2 * len(TINY.seeds) * len(encodings) * len(lengths)
    for r in records:
        assert r["experiment"] == "length-generalization"
        assert r["metric"] == "accuracy" and r["task"] in ("copy", "reverse")
        assert r["train_length"] == 4 and r["eval_length"] in lengths
        if r["encoding"] == "learned" and r["eval_length"] > 4:
            assert r["value"] is None and "max_positions=10" in r["note"]
        else:
            assert 0.0 <= r["value"] <= 1.0 and "note" not in r
    for task in ("copy", "reverse"):
        for encoding in encodings:
            got = sorted(
                r["eval_length"] for r in records if r["task"] == task and r["encoding"] == encoding
            )
            assert got == lengths
    assert (tmp_path / "models" / "train--reverse--rope--seed0.safetensors").exists()
