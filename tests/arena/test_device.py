"""Where the arena trains: the device chosen once for a run (``--device``), and bfloat16
autocast (``--bf16``), exercised on the CPU at the tiny size (a GPU run takes the same path
with ``device.type == "cuda"``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from posenc.arena import run_arena
from posenc.arena.data.tasks import kv_batch
from posenc.arena.files.atomic import read_json
from posenc.arena.running.distributed import world
from posenc.arena.running.training import TrainConfig, train_model
from posenc.models import TransformerLM


def test_device_is_checked_by_name() -> None:
    assert world("cpu").device.type == "cpu"
    with pytest.raises(ValueError, match="device must be one of"):
        world("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            world("cuda")


def _losses(autocast: torch.dtype | None) -> list[float]:
    torch.manual_seed(0)
    model = TransformerLM(130, 16, 1, 2, encoding="rope")
    config = TrainConfig(steps=3, batch_size=4, warmup_steps=1, checkpoint_every=0)

    def make_batch(generator: torch.Generator):
        return kv_batch(4, 3, generator, n_queries=3)

    return train_model(model, make_batch, config, seed=0, autocast=autocast).losses


def test_bf16_autocast_trains_in_bfloat16_and_keeps_float32_weights() -> None:
    full, half = _losses(None), _losses(torch.bfloat16)
    assert all(math.isfinite(x) for x in half)
    # the same steps in bfloat16 matmuls: close to float32 (8 bits of mantissa), not equal
    assert half != full and half == pytest.approx(full, rel=0.05)


def test_a_run_records_its_device_and_precision(tmp_path: Path) -> None:
    out = run_arena(
        ["extrapolation"],
        "tiny",
        out=tmp_path / "run",
        encodings=["rope"],
        bars=False,
        device="cpu",
        bf16=True,
    )
    config = read_json(out / "run.json")["config"]
    assert config["device"] == "cpu" and config["bf16"] is True
    assert read_json(out / "results.json")["measurements"]
