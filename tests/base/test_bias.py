"""BiasEncoding.derived: what a call derives from an encoding is kept while the encoding is
unchanged, and computed anew the moment its config, parameters or buffers change; and
distance_values, the bias by distance the distance runner reads, kept the same way."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import posenc


class Counter:
    """A compute function that counts its calls and returns a new tensor of the
    encoding's first parameter each time (or of nothing)."""

    def __init__(self, enc: posenc.BiasEncoding) -> None:
        self.enc, self.calls = enc, 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        params = list(self.enc.parameters())
        return params[0].detach().sum() * 1.0 if params else torch.tensor(float(self.calls))


@torch.no_grad()
def test_a_value_is_computed_once_while_the_encoding_is_unchanged():
    enc = posenc.create("t5", n_heads=2)
    count = Counter(enc)
    first = enc.derived("sum", count)
    assert enc.derived("sum", count) is first
    assert count.calls == 1
    assert enc.derived(("sum", 2), count) is not first  # another key, another value
    assert count.calls == 2


@pytest.mark.parametrize(
    "change",
    [
        "in place",
        "load_state_dict",
        "data",
        "to float64",
        "config",
        "new parameter",
    ],
)
def test_any_change_of_the_encoding_computes_it_anew(change):
    enc = posenc.create("t5", n_heads=2)
    count = Counter(enc)
    with torch.no_grad():
        before = enc.derived("sum", count)
        if change == "in place":
            enc.weight.add_(1.0)
        elif change == "load_state_dict":
            enc.load_state_dict({k: v + 1 for k, v in enc.state_dict().items()})
        elif change == "data":
            enc.weight.data = enc.weight.data + 1.0
        elif change == "to float64":
            enc.to(torch.float64)
        elif change == "config":
            enc.config = dataclasses.replace(enc.config)
        else:
            enc.weight = torch.nn.Parameter(enc.weight.detach() + 1.0)
        after = enc.derived("sum", count)
    assert count.calls == 2
    assert after is not before
    if change == "to float64":
        assert (before.dtype, after.dtype) == (torch.float32, torch.float64)
    elif change != "config":
        assert not torch.equal(after, before)


def test_nothing_is_kept_where_a_gradient_reaches_a_parameter():
    enc = posenc.create("t5", n_heads=2)
    count = Counter(enc)
    first, second = enc.derived("sum", count), enc.derived("sum", count)
    assert count.calls == 2 and first is not second
    host = [enc.derived("host", lambda: 1.5, host=True) for _ in range(2)]
    assert host == [1.5, 1.5]
    with torch.no_grad():
        kept = [enc.derived("sum", count) for _ in range(2)]
    assert count.calls == 3 and kept[0] is kept[1]
    alibi = posenc.create("alibi", n_heads=2)  # no parameters: kept in grad mode too
    values = [alibi.derived("x", Counter(alibi)) for _ in range(2)]
    assert values[0] is values[1]


def test_a_host_value_is_kept_under_grad_mode_and_read_again_after_a_step():
    enc = posenc.create("fire", n_heads=2)
    reads = []

    def threshold() -> float:
        reads.append(1)
        return float(enc.threshold().detach())

    assert enc.derived("threshold", threshold, host=True) == 512.0
    assert enc.derived("threshold", threshold, host=True) == 512.0
    assert len(reads) == 1
    with torch.no_grad():
        enc.threshold_scale.mul_(2.0)  # an optimizer's step
    assert enc.derived("threshold", threshold, host=True) == 1024.0
    assert len(reads) == 2
    assert enc.invariant_below() == 1024.0


def test_inference_mode_keeps_its_own_values():
    enc = posenc.create("alibi", n_heads=2)
    with torch.inference_mode():
        inside = enc.derived("x", lambda: torch.ones(2))
    outside = enc.derived("x", lambda: torch.ones(2))
    assert inside.is_inference() and not outside.is_inference()


def test_a_copy_keeps_nothing_of_the_original():
    enc = posenc.create("alibi", n_heads=2)
    enc.derived("x", lambda: torch.ones(2))
    assert "_derived" in enc.__dict__
    assert "_derived" not in copy.deepcopy(enc).__dict__


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["not", "hashable"], lambda: 1), "key must be hashable"),
        (("x", 1), "compute must be callable"),
        (("x", lambda: 1, "yes"), "host must be a bool"),
    ],
)
def test_bad_arguments_are_refused_by_name(args, match):
    enc = posenc.create("alibi", n_heads=2)
    *positional, host = args if len(args) == 3 else (*args, False)
    with pytest.raises(TypeError, match=match):
        enc.derived(*positional, host=host)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
@pytest.mark.parametrize("causal", [True, False])
def test_distance_values_are_the_bias_by_distance_and_kept(name, causal):
    enc = posenc.create(name, n_heads=3)
    n = 7
    with torch.no_grad():
        values = enc.distance_values(n, causal, "cpu")
        assert enc.distance_values(n, causal, torch.device("cpu")) is values
        wide = enc.distance_values(n, causal, "cpu", torch.float64)
        expected = enc.bias(torch.tensor([n - 1]), torch.arange(2 * n - 1))[:, 0]
    if causal:
        expected = expected.masked_fill(torch.arange(2 * n - 1) > n - 1, float("-inf"))
    assert torch.equal(values, expected)
    assert wide.dtype == torch.float64 and torch.equal(wide, expected.double())
    if name != "alibi":  # a parameter: the values carry its gradient, computed per call
        grad = enc.distance_values(n, causal, "cpu")
        assert grad.grad_fn is not None and grad is not enc.distance_values(n, causal, "cpu")
        assert torch.equal(grad.detach(), expected)


def test_inside_an_unchanged_block_the_state_is_compared_once(monkeypatch):
    """One attention call asks several derived values of one encoding (its plan, its values
    by distance, FIRE's threshold): inside UNCHANGED its state is compared at the first
    only; outside, at each; after the block a change is seen again."""
    from posenc.base import bias as bias_module

    walks = []
    gather = bias_module._gather
    monkeypatch.setattr(bias_module, "_gather", lambda m, into: walks.append(m) or gather(m, into))
    enc = posenc.create("fire", n_heads=2)
    with torch.no_grad():
        with bias_module.UNCHANGED:
            for key in ("a", "b", "c"):
                enc.derived(key, lambda: torch.ones(1))
        assert walks.count(enc) == 1
        for key in ("a", "b", "c"):
            enc.derived(key, lambda: torch.ones(1))
        assert walks.count(enc) == 4
        kept = enc.derived("a", lambda: torch.zeros(1))
        enc.c.add_(1.0)
        with bias_module.UNCHANGED:
            assert enc.derived("a", lambda: torch.zeros(1)) is not kept
