"""A whole arena run: every experiment end to end on the tiny preset, the run directory,
resuming after SIGKILL, and training on two processes with DistributedDataParallel."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.arena import EXPERIMENTS, run_arena
from posenc.arena.data.batches import lm_batch
from posenc.arena.files.atomic import read_json
from posenc.arena.running import context
from posenc.arena.running.context import RunContext
from posenc.arena.running.distributed import World
from posenc.arena.running.presets import TINY
from posenc.arena.running.training import TrainConfig, train_model
from posenc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    # one thread per process: results are bitwise reproducible for one thread count
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arena") / "run"
    run_arena(["all"], TINY, out=out, bars=False)
    return out


def test_all_experiments_end_to_end(tiny_run: Path) -> None:
    results = read_json(tiny_run / "results.json")
    assert results["experiments"] == list(EXPERIMENTS)
    seen = {r["experiment"] for r in results["measurements"]}
    assert seen == set(EXPERIMENTS)
    for name in ("run.json", "results.csv", "report.html"):
        assert (tiny_run / name).stat().st_size > 0
    run = read_json(tiny_run / "run.json")
    assert run["config"]["preset"]["name"] == "tiny"
    # every trained model reports its speed; learned cannot run past its table
    assert all(t["tokens_per_s"] > 0 for t in results["timings"].values())
    learned = [
        r
        for r in results["measurements"]
        if r["experiment"] == "extrapolation" and r["encoding"] == "learned"
    ]
    assert {r["value"] is None for r in learned if r["eval_length"] > TINY.train_length} == {True}
    assert all(r["value"] is not None for r in learned if r["eval_length"] == TINY.train_length)


def test_a_run_directory_is_not_overwritten(tiny_run: Path) -> None:
    with pytest.raises(ValueError, match="--resume"):
        run_arena(["extrapolation"], TINY, out=tiny_run, bars=False)
    with pytest.raises(ValueError, match="seeds"):
        run_arena(["extrapolation"], TINY, out=tiny_run, resume=True, seeds=[5], bars=False)


def test_resume_of_a_finished_run_loads_everything(tiny_run: Path, tmp_path: Path) -> None:
    before = read_json(tiny_run / "results.json")
    mtimes = {p: p.stat().st_mtime_ns for p in (tiny_run / "units").iterdir()}
    run_arena(["all"], TINY, out=tiny_run, resume=True, bars=False)
    after = read_json(tiny_run / "results.json")
    assert after["measurements"] == before["measurements"]
    assert after["timings"] == before["timings"]
    assert {p: p.stat().st_mtime_ns for p in (tiny_run / "units").iterdir()} == mtimes


def test_report_and_compare_commands(tiny_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tiny_run / "report.html").unlink()
    figures = tiny_run.parent / "figures"
    assert main(["arena", "report", str(tiny_run), "--figures", str(figures)]) == 0
    assert (tiny_run / "report.html").exists()
    names = sorted(p.name for p in figures.iterdir())
    assert names == sorted(f"arena-{e}.png" for e in EXPERIMENTS)
    assert all((figures / n).read_bytes().startswith(b"\x89PNG") for n in names)
    assert main(["arena", "compare", str(tiny_run), str(tiny_run)]) == 0
    assert "extrapolation" in capsys.readouterr().out


def test_bad_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arena", "run", "nonsense", "--out", str(tmp_path / "x")]) == 2
    assert "unknown experiment 'nonsense'" in capsys.readouterr().err
    assert main(["arena", "run", "all", "--preset", "huge", "--out", str(tmp_path / "y")]) == 2
    assert "unknown preset 'huge'" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert (
        main(
            ["arena", "run", "extrapolation", "--corpus", str(empty), "--out", str(tmp_path / "z")]
        )
        == 2
    )
    assert str(empty) in capsys.readouterr().err
    assert main(["arena", "report", str(tmp_path / "missing")]) == 2


#: a preset whose language models train long enough to be killed between checkpoints
KILLABLE = dataclasses.replace(
    TINY,
    encodings=("nope", "rope"),
    lm=TrainConfig(steps=200, batch_size=4, warmup_steps=2, checkpoint_every=10),
)
SCRIPT = f"""
import dataclasses, sys, torch
torch.set_num_threads(1)
from posenc.arena import run_arena
from posenc.arena.running.presets import TINY
from posenc.arena.running.training import TrainConfig, train_model
preset = dataclasses.replace(TINY, encodings={KILLABLE.encodings!r}, lm={KILLABLE.lm!r})
run_arena(["extrapolation"], preset, out=sys.argv[1], resume=True, bars=False)
"""


def _arena(out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(out)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_resume_after_sigkill_gives_identical_results(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the script: the configuration records it
    try:  # the whole run here, in this process: the script's start-up once less
        run_arena(["extrapolation"], KILLABLE, out=whole, resume=True, bars=False)
    finally:
        torch.set_num_threads(threads)
    # kill the second model's training after its second checkpoint, mid-run
    proc = _arena(killed)
    marker = killed / "checkpoints" / "train--lm--rope--seed0" / "checkpoint.json"
    deadline = time.monotonic() + 600
    while not (marker.exists() and json.loads(marker.read_text())["step"] >= 40):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "results.json").exists()
    assert _arena(killed).wait(timeout=600) == 0
    a, b = read_json(whole / "results.json"), read_json(killed / "results.json")
    assert a["measurements"] == b["measurements"]  # bitwise: JSON keeps every float's digits
    assert b["timings"]["lm--rope--seed0"]["resumed_from"] >= 40
    losses = [
        read_json(d / "units" / "train--lm--rope--seed0.json")["losses"] for d in (whole, killed)
    ]
    assert losses[0] == losses[1]


#: every kind of batch: language model (every target scored), copy/reverse (rows of random
#: lengths) and masked LM (random masks), so processes score different numbers of targets
DDP_EXPERIMENTS = ["extrapolation", "length-generalization", "nope-needs-causality"]

DDP_SCRIPT = f"""
import sys, torch
torch.set_num_threads(1)
from posenc.arena import run_arena
run_arena({DDP_EXPERIMENTS!r}, "tiny", out=sys.argv[1], bars=False)
"""


def test_two_processes_with_gloo_train_like_one(tmp_path: Path) -> None:
    """torchrun, 2 CPU processes, gloo: each trains on half of every global batch; DDP
    averages the gradients, so the loss curve is the single process's up to rounding, also
    where the halves score different numbers of targets."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    torch.set_num_threads(1)  # as in the script: the configuration records it
    run_arena(DDP_EXPERIMENTS, TINY, out=single, bars=False)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
    ]
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    done = subprocess.run(
        [*torchrun, str(script), str(ddp)], env=_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    units = sorted(p.name for p in (single / "units").glob("train--*.json"))
    assert {u.split("--")[1] for u in units} == {"lm", "copy", "reverse", "mlm"}
    for unit in units:
        a = torch.tensor(read_json(single / "units" / unit)["losses"])
        b = torch.tensor(read_json(ddp / "units" / unit)["losses"])
        # a few steps of AdamW on a 1-layer model: the rounding of two half-batch gradient
        # sums averaged against one full sum (n·eps with n ~ the batch's tokens) grows by
        # at most a few orders over 6 steps
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    # only rank 0 wrote: one results file, and the measurements of both agree
    assert len(read_json(ddp / "results.json")["measurements"]) == len(
        read_json(single / "results.json")["measurements"]
    )


class _Rank1(World):
    """The second of two processes, without a process group: collectives act locally."""

    def __init__(self) -> None:
        super().__init__(1, 2, torch.device("cpu"))

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def main_says(self, value: bool) -> bool:
        return value

    def barrier(self) -> None:
        pass


def test_only_rank_0_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", lambda module: module)
    ctx = RunContext(TINY, tmp_path / "run", place=_Rank1())
    model = ctx.new_model(TINY.model, "rope", 0, 256)
    config = TrainConfig(steps=4, batch_size=4, warmup_steps=1, checkpoint_every=2)
    batch = lm_batch(torch.randint(0, 256, (500,), dtype=torch.uint8), 4, 8, torch.Generator())
    ctx.trained("train--x", model, lambda generator: batch, config, seed=0)
    ctx.unit("unit--x", lambda: [])
    assert not (tmp_path / "run").exists()


def test_resume_needs_the_directory() -> None:
    with pytest.raises(ValueError, match="--resume continues the run in --out"):
        run_arena(["extrapolation"], TINY, resume=True, bars=False)


#: two language models, one experiment: a run of about a second
TWO = dataclasses.replace(TINY, encodings=("nope", "rope"))


@pytest.fixture
def threads_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """torch's thread count while each model of a run trains."""
    seen: list[int] = []

    def train(*args: Any, **kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        return train_model(*args, **kwargs)

    monkeypatch.setattr(context, "train_model", train)
    return seen


def test_threads_are_set_for_the_run_recorded_and_kept_on_resume(
    tmp_path: Path, threads_seen: list[int]
) -> None:
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    out = tmp_path / "run"
    run_arena(["extrapolation"], TWO, out=out, bars=False, threads=wanted)
    assert threads_seen == [wanted, wanted]  # both models trained with them
    assert torch.get_num_threads() == before  # restored after the run
    assert read_json(out / "run.json")["config"]["torch_threads"] == wanted
    # a resumed run without threads takes the recorded count, whatever torch has now
    for unit in ("extrapolation--rope--seed0", "train--lm--rope--seed0"):
        (out / "units" / f"{unit}.json").unlink()  # as if killed before rope's model ended
    run_arena(["extrapolation"], TWO, out=out, resume=True, bars=False)
    assert threads_seen == [wanted, wanted, wanted]
    assert torch.get_num_threads() == before
    # another count is refused by name, before anything runs
    with pytest.raises(ValueError, match=f"--threads {wanted}, this try with {wanted + 1}"):
        run_arena(["extrapolation"], TWO, out=out, resume=True, bars=False, threads=wanted + 1)
    assert threads_seen == [wanted, wanted, wanted]
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (-2, ValueError), ("1", TypeError)])
def test_a_bad_thread_count_is_refused_by_name(
    tmp_path: Path, bad: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="--threads"):
        run_arena(["extrapolation"], TWO, out=tmp_path / "run", bars=False, threads=bad)
    assert not (tmp_path / "run").exists()


def test_json_records_count_every_unit_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run_arena(["extrapolation", "length-generalization"], TWO, out=out, bars=False, records=True)
    stdout, stderr = capsys.readouterr()
    records = [json.loads(line) for line in stdout.splitlines()]  # stdout holds only records
    units = sorted(p.stem for p in (out / "units").glob("*.json") if not p.stem.startswith("train"))
    total = len(units)  # extrapolation: 2 encodings; length-generalization: 2 tasks x 2
    assert total == 6
    assert [r["event"] for r in records] == ["start", *["unit"] * total, "end"]
    assert [r["done"] for r in records] == [0, *range(1, total + 1), total]
    assert {r["total"] for r in records} == {total}
    assert sorted(r["unit"] for r in records[1:-1]) == units
    assert records[-1]["report"] == str(out / "report.html")
    assert "extrapolation: perplexity" in stderr  # the table, for a person, on stderr


def test_the_terminal_line_counts_units_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_arena(["extrapolation"], TWO, out=tmp_path / "run", bars=True)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("arena: ")]
    assert lines[0].startswith("arena: 1/2 units done, ")
    assert lines[1].startswith("arena: 2/2 units done in ")
    assert len(lines) == 2
