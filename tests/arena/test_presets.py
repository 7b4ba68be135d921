"""Presets and training recipes refuse impossible values by name."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from posenc.arena.running.presets import PRESETS, TINY, get_preset
from posenc.arena.running.training import TrainConfig, learning_rate


def test_every_preset_is_valid_and_found_by_name() -> None:
    for name, preset in PRESETS.items():
        assert get_preset(name) is preset
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        get_preset("huge")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seeds": ()}, "seeds must be distinct"),
        ({"seeds": (1, 1)}, "seeds must be distinct"),
        ({"seeds": (-1,)}, "seed"),
        ({"kv_test_pairs": (4, 8)}, "kv_test_pairs must start with the trained kv_pairs"),
        ({"eval_factors": (2, 4)}, "eval_factors must start at 1"),
        ({"task_test_lengths": (9, 3)}, "task_test_lengths"),
        ({"train_length": 0}, "train_length"),
    ],
)
def test_bad_presets(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TINY, **change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": -1}, "batch_size"),
        ({"checkpoint_every": -1}, "checkpoint_every"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"min_lr_ratio": 2.0}, "min_lr_ratio"),
    ],
)
def test_bad_train_configs(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{"steps": 10, "batch_size": 4, **change})  # type: ignore[arg-type]


def test_learning_rate_warms_up_then_decays_to_its_floor() -> None:
    config = TrainConfig(steps=100, batch_size=4, lr=1e-2, warmup_steps=10, min_lr_ratio=0.1)
    rates = [learning_rate(step, config) for step in range(100)]
    assert rates[0] == pytest.approx(1e-3) and rates[9] == pytest.approx(1e-2)
    # non-increasing after the warm-up (up to the rounding of cos(0) = 1)
    assert all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(rates[9:]))
    assert learning_rate(100, config) == pytest.approx(1e-3)  # the floor at the end


def test_all_leaves_out_what_a_preset_leaves_out_and_a_name_still_runs_it() -> None:
    from posenc.arena.experiments import NAMES
    from posenc.arena.running.launch import experiment_names

    quick = get_preset("quick")
    left = tuple(name for name, _ in quick.left_out)
    assert left == ("lost-in-the-middle",) and all(why for _, why in quick.left_out)
    assert experiment_names(["all"], left) == [n for n in NAMES if n != "lost-in-the-middle"]
    assert experiment_names(["lost-in-the-middle"], left) == ["lost-in-the-middle"]
    # the standard preset runs every experiment, with three seeds
    standard = get_preset("standard")
    assert standard.left_out == () and len(standard.seeds) == 3
    assert standard.task_train_lengths == (1, 20) and standard.task_test_lengths == (21, 40)
    assert standard.kv_test_pairs == (8, 16, 32)  # 1x, 2x and 4x the trained pairs


def test_samplers_are_named_samplers() -> None:
    assert dataclasses.replace(TINY, samplers=("pose", "randomized")).samplers == (
        "pose",
        "randomized",
    )
    for bad in (("shuffle",), ("pose", "pose")):
        with pytest.raises(ValueError, match="samplers must be distinct names"):
            dataclasses.replace(TINY, samplers=bad)
