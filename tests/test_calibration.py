"""posenc.calibration: a choice is measured once per machine and kept (in memory and in a
file named by what a timing depends on), the default unless another candidate is faster by
the margin, and nothing is measured with calibration off; the distance runner's block size
is one such choice, its result the same at any block; so is the rows runner's backward block,
measured on the encoding itself."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import calibration
from posenc.attn.runners import distance, rows


@pytest.fixture
def calibrating(tmp_path, monkeypatch):
    """Calibration on, its files in a scratch folder, nothing kept from another test."""
    monkeypatch.setenv("POSENC_CALIBRATE", "1")
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibration, "_chosen", {})
    return tmp_path


def timer(times):
    """A ``measure`` that returns ``times[candidate]`` and records what it was asked."""
    asked = []

    def measure(candidate):
        asked.append(candidate)
        return times[candidate]

    return measure, asked


def test_the_fastest_is_chosen_kept_and_written(calibrating):
    measure, asked = timer({64: 1.0, 128: 0.5, 256: 0.8})
    assert calibration.choose("k", [128, 256], 64, measure) == 128
    rounds = calibration.ROUNDS
    assert asked == [64, 128, 256] * rounds  # in turns, every candidate once a round
    assert calibration.choose("k", [128, 256], 64, measure) == 128  # in memory
    assert len(asked) == 3 * rounds
    path = calibration.cache_path()
    assert path.parent == calibrating and json.loads(path.read_text()) == {"k": 128}
    calibration._chosen.clear()  # a new process: read from the file, not measured
    assert calibration.choose("k", [128, 256], 64, measure) == 128 and len(asked) == 3 * rounds


def test_a_slow_spell_in_one_round_does_not_choose(calibrating):
    """The default measured slow once (another tenant's busy second), then at its speed: the
    candidates are measured in turns and each keeps its fastest, so the default stays."""
    spells = {64: [2.0, 1.0], 128: [0.98, 0.98]}
    assert calibration.ROUNDS >= 2
    assert calibration.choose("k", [128], 64, lambda c: spells[c].pop(0)) == 64


def test_the_default_stays_unless_another_is_faster_by_the_margin(calibrating):
    close = 1.0 - calibration.MARGIN / 2  # within the margin: noise
    measure, _ = timer({64: 1.0, 128: close})
    assert calibration.choose("a", [128], 64, measure) == 64
    measure, _ = timer({64: 1.0, 128: 1.0 - 2 * calibration.MARGIN})
    assert calibration.choose("b", [128], 64, measure) == 128


def test_off_means_the_default_and_nothing_measured(calibrating, monkeypatch):
    monkeypatch.setenv("POSENC_CALIBRATE", "0")
    measure, asked = timer({64: 1.0, 128: 0.1})
    assert calibration.choose("k", [128], 64, measure) == 64 and asked == []
    assert not list(calibrating.iterdir())


def test_a_file_that_is_not_this_format_is_measured_again(calibrating):
    path = calibration.cache_path()
    path.write_text("{not json")
    measure, asked = timer({64: 1.0, 128: 0.5})
    assert calibration.choose("k", [128], 64, measure) == 128 and asked
    # a kept value that is no longer a candidate is measured again too
    path.write_text(json.dumps({"j": 999}))
    calibration._chosen.clear()
    assert calibration.choose("j", [128], 64, measure) == 128


def test_the_file_names_the_machine_facts(calibrating, monkeypatch):
    first = calibration.cache_path()
    monkeypatch.setattr(torch, "get_num_threads", lambda: 977)
    assert calibration.cache_path() != first  # another thread count: another file


def test_the_distance_block_is_measured_once_and_changes_no_result(calibrating, monkeypatch):
    """A causal T5-like call of 512 queries: the block is one of the candidates, measured
    once at the probe length; the output equals the default block's to rounding."""
    asked = []
    real = calibration.best_time
    monkeypatch.setattr(calibration, "best_time", lambda run: asked.append(run) or real(run, 1))
    q, k, v = torch.randn(3, 1, 2, 512, 16).unbind()
    values = torch.randn(2, 2 * 512 - 1)
    values[:, 512:] = float("-inf")
    out = distance.distance_attention(q, k, v, values, 0.25, True)
    block = distance.tuned_block(q)
    # up to half the probe, 64 the default, each once a round
    assert block in (64, 128, 256) and len(asked) == 3 * calibration.ROUNDS
    kept = json.loads(calibration.cache_path().read_text())
    assert kept == {"distance_block/L512/d16/float32": block}
    fixed = distance.distance_attention(q, k, v, values, 0.25, True, block=64)
    # the same softmax over the same keys, another kernel call per block: rounding
    assert_close(out, fixed, atol=1e-5, rtol=1e-5)


def test_a_fake_tensor_is_not_measured(calibrating):
    """Under FakeTensorMode (as export and the device checks trace) the block is the default
    and nothing is timed or written: a fake call has no time."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.randn(1, 2, 1024, 16)
        assert distance.tuned_block(q) == distance.block_size(1024)
    assert not list(calibrating.iterdir()) and calibration.chosen() == {}


def test_the_backward_block_is_measured_once_and_changes_no_gradient(calibrating, monkeypatch):
    """A causal call of 512 queries that trains: the backward's block is one of the
    candidates, measured once (forward and backward at the probe length), written beside the
    forward's; every block gives the gradients of the default one to rounding."""
    asked = []
    real = calibration.best_time
    monkeypatch.setattr(calibration, "best_time", lambda run: asked.append(run) or real(run, 1))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 512, 16, generator=gen).requires_grad_(True) for _ in range(3))
    values = torch.randn(2, 2 * 512 - 1, generator=gen)
    values[:, 512:] = float("-inf")
    values.requires_grad_(True)
    inputs = (q, k, v, values)

    def grads(backward_block=None):
        if backward_block is not None:
            monkeypatch.setattr(distance, "tuned_backward_block", lambda q: backward_block)
        out = distance.distance_attention(q, k, v, values, 0.25, True, block=128)
        return torch.autograd.grad((out * out).sum(), inputs)

    tuned = grads()
    kept = json.loads(calibration.cache_path().read_text())
    block = kept["distance_backward_block/L512/d16/float32"]
    # 32, 64 (the default), 128, 256, each once a round; the forward's block was given
    assert block in distance.BACKWARD_CANDIDATES and len(asked) == 4 * calibration.ROUNDS
    for other in distance.BACKWARD_CANDIDATES:
        for got, want in zip(grads(other), tuned, strict=True):
            assert_close(got, want, atol=1e-5, rtol=1e-5)  # the same sums, other blocks
    assert calibration.chosen()["distance_backward_block/L512/d16/float32"] == block


def test_the_rows_backward_block_is_measured_on_the_encoding_once(
    calibrating, monkeypatch, grad_tol, score_size
):
    """FIRE that trains, 512 queries: the backward's block is one of the candidates,
    measured once on FIRE's own forward and backward at the probe length, written under
    FIRE's name and heads; the probe writes no gradient to FIRE's parameters, and every
    block gives the default one's gradients to rounding."""
    asked = []
    real = calibration.best_time
    monkeypatch.setattr(calibration, "best_time", lambda run: asked.append(run) or real(run, 1))
    torch.manual_seed(0)
    fire = posenc.create("fire", n_heads=2, init_threshold=100.0)
    q, k, v = (torch.randn(1, 2, 512, 16).requires_grad_(True) for _ in range(3))
    block = rows.tuned_backward_block(fire, q)
    key = "rows_backward_block/Fire/h2/L512/d16/float32"
    assert json.loads(calibration.cache_path().read_text()) == {key: block}
    # 64, 128 (the default), 256, each once a round; nothing reached FIRE's parameters
    assert block in rows.BACKWARD_CANDIDATES and len(asked) == 3 * calibration.ROUNDS
    assert all(p.grad is None for p in fire.parameters())
    inputs = (q, k, v, *fire.parameters())

    used = []

    def grads(backward_block):
        monkeypatch.setattr(
            rows, "tuned_backward_block", lambda enc, q: used.append(enc) or backward_block
        )
        out = posenc.attention(q, k, v, encoding=fire, causal=True)
        return torch.autograd.grad((out * out).sum(), inputs)

    want = grads(rows.BACKWARD_BLOCK)
    assert used == [fire]  # the rows runner took the call, and asked for its block
    with torch.no_grad():
        bias = fire.bias(torch.arange(512), torch.arange(512))
    # the same sums in other blocks: a parameter's gradient sums every score, so its
    # rounding follows the summation order (FIRE's MLP's gradients, near 2, moved by up to
    # 5e-5 under ATen's default kernels)
    tol = grad_tol(q, k, want, score_size(q, k, bias=bias, causal=True))
    for other in rows.BACKWARD_CANDIDATES:
        for got, ref in zip(grads(other), want, strict=True):
            assert_close(got, ref, **tol)
