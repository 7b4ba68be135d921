from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from posenc.arena.files import atomic as files
from posenc.arena.files import checkpoints
from posenc.arena.files.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_json,
)
from posenc.arena.files.checkpoints import (
    load_checkpoint,
    load_weights,
    rng_state,
    save_checkpoint,
    save_weights,
    set_rng_state,
)
from posenc.models import TransformerLM


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_writers_round_trip_create_parents_and_leave_no_temp_files(tmp_path):
    atomic_write_bytes(tmp_path / "a" / "b" / "x.bin", b"\x00\xffdata")
    atomic_write_text(tmp_path / "a" / "t.txt", "λ text\n")
    obj = {"value": 1.5, "none": None, "list": [1, "two"], "nested": {"k": True}}
    atomic_write_json(tmp_path / "a" / "b" / "c" / "r.json", obj)
    atomic_write_json(tmp_path / "a" / "b" / "c" / "r.json", obj)  # over an existing file

    assert (tmp_path / "a" / "b" / "x.bin").read_bytes() == b"\x00\xffdata"
    assert (tmp_path / "a" / "t.txt").read_text(encoding="utf-8") == "λ text\n"
    assert read_json(tmp_path / "a" / "b" / "c" / "r.json") == obj
    assert (tmp_path / "a" / "b" / "c" / "r.json").read_text().endswith("}\n")
    assert _names(tmp_path / "a") == ["b", "t.txt"]
    assert _names(tmp_path / "a" / "b") == ["c", "x.bin"]
    assert _names(tmp_path / "a" / "b" / "c") == ["r.json"]


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_files_get_the_mode_open_would_give(tmp_path):
    atomic_write_bytes(tmp_path / "x", b"1")
    (tmp_path / "y").write_bytes(b"1")
    assert (tmp_path / "x").stat().st_mode == (tmp_path / "y").stat().st_mode


@pytest.mark.parametrize("fails", ["fsync", "replace"])
def test_an_exception_mid_write_leaves_the_previous_file(tmp_path, monkeypatch, fails):
    target = tmp_path / "x.bin"
    atomic_write_bytes(target, b"old")

    def boom(*args):
        raise OSError("disk on fire")

    monkeypatch.setattr(files.os, fails, boom)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_write_bytes(target, b"new" * 1000)
    assert target.read_bytes() == b"old"
    assert _names(tmp_path) == ["x.bin"]


_WRITER = """
import sys
from posenc.arena.files.atomic import atomic_write_bytes
path, size = sys.argv[1], int(sys.argv[2])
i = 1
while True:
    atomic_write_bytes(path, bytes([i % 256]) * size)
    if i == 2:
        print("started", flush=True)
    i += 1
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_write_leaves_the_old_or_the_new_content(tmp_path):
    target, size = tmp_path / "big.bin", 4 << 20
    atomic_write_bytes(target, bytes([0]) * size)
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(target), str(size)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        time.sleep(0.3)  # well inside the loop: a write in flight when the kill lands
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    content = target.read_bytes()
    assert len(content) == size
    assert content == content[:1] * size  # one write's bytes, complete


@pytest.mark.parametrize("bad", [{"a": object()}, {"a": float("nan")}, [float("inf")], {(1, 2): 3}])
def test_a_bad_json_object_raises_and_leaves_the_old_file(tmp_path, monkeypatch, bad):
    target = tmp_path / "r.json"
    atomic_write_json(target, {"old": 1})
    opened = []
    monkeypatch.setattr(files.tempfile, "mkstemp", lambda *a, **k: opened.append(a))
    with pytest.raises((TypeError, ValueError)):
        atomic_write_json(target, bad)
    assert opened == []  # serialised before anything is opened
    assert read_json(target) == {"old": 1}
    assert _names(tmp_path) == ["r.json"]


def test_read_json_names_the_path_of_invalid_json(tmp_path):
    (tmp_path / "bad.json").write_text('{"a": 1', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json"):
        read_json(tmp_path / "bad.json")


def _model(seed):
    torch.manual_seed(seed)
    return TransformerLM(32, 16, 1, 2, encoding="rope")


def _train(model, optimizer, steps):
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 32, (2, 9))
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_weights_round_trip_and_a_mismatch_names_the_keys(tmp_path):
    a, b = _model(0), _model(1)
    save_weights(tmp_path / "w.safetensors", a)
    load_weights(tmp_path / "w.safetensors", b)
    for name, tensor in a.state_dict().items():
        assert torch.equal(b.state_dict()[name], tensor), name
    with pytest.raises(ValueError, match=r"w\.safetensors.*blocks\.1\.attn\.qkv\.weight"):
        load_weights(tmp_path / "w.safetensors", TransformerLM(32, 16, 2, 2, encoding="rope"))
    with pytest.raises(ValueError, match=r"w\.safetensors.*embed\.weight"):
        load_weights(tmp_path / "w.safetensors", TransformerLM(40, 16, 1, 2, encoding="rope"))


def test_checkpoint_round_trip_resumes_bitwise(tmp_path):
    model = _model(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = _train(model, optimizer, 2)
    state = {"optimizer": optimizer.state_dict(), "rng": rng_state(), "step": 2}
    state |= {"losses": losses, "note": "plain values", "pair": (1, 2.5)}
    save_checkpoint(tmp_path, model, state)
    assert _names(tmp_path) == ["checkpoint.json", "model-2.safetensors", "state-2.pt"]
    saved = copy.deepcopy(state["optimizer"]["state"])  # its tensors are the live ones
    _train(model, optimizer, 1)  # the uninterrupted run goes on

    fresh = _model(1)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    loaded = load_checkpoint(tmp_path, fresh)
    assert loaded is not None
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    assert loaded["step"] == 2 and loaded["losses"] == losses
    assert loaded["note"] == "plain values" and loaded["pair"] == (1, 2.5)
    for index, tensors in fresh_optimizer.state_dict()["state"].items():
        for key, tensor in tensors.items():
            assert torch.equal(tensor, saved[index][key]), (index, key)
    set_rng_state(loaded["rng"])
    _train(fresh, fresh_optimizer, 1)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_a_newer_checkpoint_replaces_the_older_files(tmp_path):
    model = _model(0)
    save_checkpoint(tmp_path, model, {"step": 1})
    (tmp_path / ".model-1.safetensorsab12.tmp").write_bytes(b"left by a kill")
    save_checkpoint(tmp_path, model, {"step": 5})
    assert _names(tmp_path) == ["checkpoint.json", "model-5.safetensors", "state-5.pt"]
    assert read_json(tmp_path / "checkpoint.json")["step"] == 5
    assert load_checkpoint(tmp_path, _model(1)) == {"step": 5}


def test_no_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path / "missing", _model(0)) is None


class _Custom:
    pass


def test_a_state_with_code_is_never_unpickled(tmp_path):
    model = _model(0)
    with pytest.raises(Exception, match="lambda"):  # pickle cannot even save a lambda
        save_checkpoint(tmp_path / "a", model, {"step": 1, "fn": lambda: 0})
    assert not (tmp_path / "a").exists()  # nothing written
    save_checkpoint(tmp_path / "b", model, {"step": 1, "obj": _Custom()})
    with pytest.raises(ValueError, match=r"state-1\.pt"):  # weights_only refuses the class
        load_checkpoint(tmp_path / "b", _model(1))


def test_a_corrupted_weights_file_names_the_file(tmp_path):
    save_checkpoint(tmp_path, _model(0), {"step": 3})
    path = tmp_path / "model-3.safetensors"
    data = bytearray(path.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model-3\.safetensors.*sha256"):
        load_checkpoint(tmp_path, _model(1))
    (tmp_path / "x.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=r"x\.safetensors"):
        load_weights(tmp_path / "x.safetensors", _model(1))


def test_an_interrupted_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    old = _model(0)
    save_checkpoint(tmp_path, old, {"step": 1})

    def boom(path, obj):
        raise OSError("killed before the commit marker")

    monkeypatch.setattr(checkpoints, "atomic_write_json", boom)
    with pytest.raises(OSError, match="commit marker"):
        save_checkpoint(tmp_path, _model(2), {"step": 2})
    fresh = _model(3)
    assert load_checkpoint(tmp_path, fresh) == {"step": 1}
    for name, tensor in old.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name


def test_rng_state_round_trip():
    state = rng_state()
    first = torch.rand(5)
    torch.rand(3)
    set_rng_state(state)
    assert torch.equal(torch.rand(5), first)
