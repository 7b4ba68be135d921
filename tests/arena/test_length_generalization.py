"""length-generalization end to end on the tiny preset, and exact match checked on a model
that is forced to be right."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from posenc.arena.data.tasks import IGNORE, SEQUENCE_VOCAB, sequence_batch
from posenc.arena.experiments import length_generalization as lg
from posenc.arena.measuring.evaluate import task_accuracies, task_accuracy
from posenc.arena.running.context import RunContext
from posenc.arena.running.presets import TINY


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
    # token accuracy: one wrong target out of all the scored ones
    exact, token = task_accuracies(Oracle(wrong, SEQUENCE_VOCAB), batch)
    assert exact == 7 / 8
    assert token == pytest.approx(1 - 1 / batch.scored_tokens())


def test_accuracies_agree_with_task_accuracy_on_a_random_model() -> None:
    batch = sequence_batch("copy", 64, 1, 5, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(SEQUENCE_VOCAB, 8), nn.Linear(8, SEQUENCE_VOCAB))
    exact, token = task_accuracies(model, batch)
    assert exact == task_accuracy(model, batch)
    logits = model(batch.inputs)
    scored = batch.targets != IGNORE
    hits = (logits.argmax(-1) == batch.targets)[scored]
    assert token == pytest.approx(hits.float().mean().item())
    assert exact <= token  # a row that is all right has all its tokens right


def test_tiny_run(tmp_path: Path) -> None:
    ctx = RunContext(TINY, tmp_path)
    lg.run(ctx)
    records = ctx.measurements
    lengths = lg.eval_lengths(ctx)
    assert lengths == [4, 5, 6]
    encodings = list(TINY.encodings or ())
    metrics = ("accuracy", "token_accuracy")
    assert len(records) == 2 * len(metrics) * len(TINY.seeds) * len(encodings) * len(lengths)
    for r in records:
        assert r["experiment"] == "length-generalization"
        assert r["metric"] in metrics and r["task"] in ("copy", "reverse")
        assert r["train_length"] == 4 and r["eval_length"] in lengths
        if r["encoding"] == "learned" and r["eval_length"] > 4:
            assert r["value"] is None and "max_positions=10" in r["note"]
        else:
            assert 0.0 <= r["value"] <= 1.0 and "note" not in r
    for task in ("copy", "reverse"):
        for encoding in encodings:
            for metric in metrics:
                got = sorted(
                    r["eval_length"]
                    for r in records
                    if (r["task"], r["encoding"], r["metric"]) == (task, encoding, metric)
                )
                assert got == lengths
    # per case: a row all right has all its tokens right
    value = {(r["task"], r["encoding"], r["eval_length"], r["metric"]): r["value"] for r in records}
    for (task, encoding, n, metric), v in value.items():
        if metric == "accuracy" and v is not None:
            assert v <= value[task, encoding, n, "token_accuracy"]
    assert (tmp_path / "models" / "train--reverse--rope--seed0.safetensors").exists()


def test_task_encodings_keeps_the_runs_encodings_in_the_preset_list(tmp_path: Path) -> None:
    assert RunContext(TINY, tmp_path).task_encodings() == list(TINY.encodings or ())
    preset = dataclasses.replace(TINY, task_encodings=("rope", "alibi", "fire"))
    assert RunContext(preset, tmp_path).task_encodings() == ["rope", "alibi"]


def test_samplers_train_each_encoding_once_more_with_each(tmp_path: Path) -> None:
    """With the preset's samplers every encoding but NoPE (which reads no positions) also
    trains as ``<encoding>+<sampler>``; a learned table then covers every drawn position,
    so it runs at every test length."""
    preset = dataclasses.replace(TINY, samplers=("randomized", "pose"))
    ctx = RunContext(preset, tmp_path)
    lg.run(ctx)
    labels = {r["encoding"] for r in ctx.measurements}
    encodings = list(TINY.encodings or ())
    expected = set(encodings) | {
        f"{e}+{s}" for e in encodings if e != "nope" for s in preset.samplers
    }
    assert labels == expected
    learned = [r for r in ctx.measurements if r["encoding"] == "learned+randomized"]
    assert learned and all(r["value"] is not None for r in learned)
    assert (tmp_path / "models" / "train--copy--rope+pose--seed0.safetensors").exists()


def test_a_sampler_draws_the_training_positions_from_the_step_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches of ``rope+randomized`` carry positions below 4 M (M the longest test
    row), sorted; the same step generator gives the same batch (a resume draws the same);
    ``rope+pose`` reaches M; plain ``rope`` carries none."""
    ctx = RunContext(dataclasses.replace(TINY, samplers=("randomized", "pose")), tmp_path)
    batches = {}

    def capture(name, model, make_batch, config, seed):  # type: ignore[no-untyped-def]
        batches[name] = make_batch
        return model

    monkeypatch.setattr(ctx, "trained", capture)
    for label in ("rope", "rope+randomized", "rope+pose"):
        lg.task_model(ctx, "copy", label, 0)
    longest = 2 * TINY.task_test_lengths[1] + 2
    draw = batches["train--copy--rope+randomized--seed0"]
    first, again = draw(torch.Generator().manual_seed(7)), draw(torch.Generator().manual_seed(7))
    assert first.positions is not None and torch.equal(first.positions, again.positions)
    assert torch.equal(first.inputs, again.inputs)
    assert (
        bool((first.positions.diff(dim=1) > 0).all()) and int(first.positions.max()) < 4 * longest
    )
    pose = batches["train--copy--rope+pose--seed0"](torch.Generator().manual_seed(7))
    assert pose.positions is not None and int(pose.positions.max()) < longest
    plain = batches["train--copy--rope--seed0"](torch.Generator().manual_seed(7))
    assert plain.positions is None
