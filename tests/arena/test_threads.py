"""posenc.arena.running.threads: ``--threads`` checked by name, set for a block and
restored, and read back from a run's ``run.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posenc.arena.running.threads import check_threads, recorded_threads, using_threads


def _other_count() -> int:
    """A thread count other than torch's current one."""
    return 1 if torch.get_num_threads() != 1 else 2


def test_using_threads_sets_them_inside_and_restores_them() -> None:
    before, wanted = torch.get_num_threads(), _other_count()
    with using_threads(wanted):
        assert torch.get_num_threads() == wanted
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="boom"), using_threads(wanted):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before  # restored after a failed run too
    with using_threads(None):
        assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -1])
def test_a_count_below_one_is_refused_by_name(bad: int) -> None:
    before = torch.get_num_threads()
    with pytest.raises(ValueError, match=r"--threads\) must be >= 1"):
        check_threads(bad)
    with pytest.raises(ValueError, match="--threads"), using_threads(bad):
        pass
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", ["2", 2.0, True])
def test_a_count_that_is_not_an_int_is_refused_by_name(bad: object) -> None:
    with pytest.raises(TypeError, match=r"--threads\) must be an int"):
        check_threads(bad)


def test_recorded_threads_reads_the_run_configuration(tmp_path: Path) -> None:
    assert recorded_threads(tmp_path) is None  # no run here yet
    (tmp_path / "run.json").write_text(json.dumps({"config": {"torch_threads": 3}}))
    assert recorded_threads(tmp_path) == 3
    (tmp_path / "run.json").write_text(json.dumps({"config": {}}))
    assert recorded_threads(tmp_path) is None
