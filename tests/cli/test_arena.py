"""posenc.cli.arena: ``posenc arena run`` with ``--threads`` (checked by name, recorded in
the run) and ``--json`` (progress records on stdout, one per line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posenc.cli import main

#: a run of two tiny language models: about a second
RUN = ["arena", "run", "extrapolation", "--preset", "tiny", "--encodings", "nope", "rope"]


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "threads (--threads) must be >= 1, got 0"), ("two", "'--threads'")],
)
def test_a_bad_thread_count_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    assert main([*RUN, "--out", str(tmp_path / "run"), "--threads", value]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_threads_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    out = tmp_path / "run"
    args = [*RUN, "--out", str(out), "--threads", str(wanted), "--json", "--no-progress"]
    assert main(args) == 0
    assert torch.get_num_threads() == before
    config = json.loads((out / "run.json").read_text())["config"]
    assert config["torch_threads"] == wanted
    stdout, stderr = capsys.readouterr()
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [(r["event"], r["done"], r["total"]) for r in records] == [
        ("start", 0, 2),
        ("unit", 1, 2),
        ("unit", 2, 2),
        ("end", 2, 2),
    ]
    assert f"report: {out / 'report.html'}" in stderr
    # resumed with another count: refused, naming the option and both counts
    assert main([*RUN, "--out", str(out), "--resume", "--threads", str(wanted + 1)]) == 2
    assert f"--threads {wanted}, this try with {wanted + 1}" in capsys.readouterr().err
