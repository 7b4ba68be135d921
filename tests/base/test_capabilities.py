"""posenc.base.capabilities: which bias encodings declare which fast paths (the planner
reads nothing else), and what each protocol gives."""

import math

import pytest
import torch

import posenc
from posenc.base import (
    BiasEncoding,
    InputBias,
    InputTransforms,
    InvariantBelow,
    LinearSlopes,
    RelativeTables,
    ScoreBias,
    ScoreWeights,
    ShiftInvariant,
)
from posenc.base.capabilities import invariant_below

PROTOCOLS = (
    ShiftInvariant,
    InvariantBelow,
    LinearSlopes,
    RelativeTables,
    InputBias,
    ScoreBias,
    InputTransforms,
    ScoreWeights,
)
#: what each registered bias encoding declares, read off its paper's form of the bias
DECLARED = {
    "alibi": {ShiftInvariant, LinearSlopes},
    "t5": {ShiftInvariant},
    "kerple": {ShiftInvariant},
    "fire": {InvariantBelow},
    "shaw": {RelativeTables},
    "fox": {InputBias},
    "cope": {ScoreBias},
    "path": {InputTransforms},
    "stick_breaking": {ScoreWeights},
}


def test_every_bias_encoding_declares_what_its_bias_is():
    biases = [n for n in posenc.available() if posenc.info(n).kind == "bias"]
    assert sorted(biases) == sorted(DECLARED)  # a new bias encoding is listed here too
    for name in biases:
        cls = posenc.registry.get(name)
        assert issubclass(cls, BiasEncoding)
        assert {p for p in PROTOCOLS if issubclass(cls, p)} == DECLARED[name], name


def test_invariant_below_reads_the_declarations():
    assert invariant_below(posenc.create("alibi", n_heads=2)) == math.inf
    fire = posenc.create("fire", n_heads=2, init_threshold=20.0)
    assert invariant_below(fire) == pytest.approx(20.0)
    assert invariant_below(posenc.create("shaw", n_heads=2, head_dim=4)) == 0.0


def test_the_protocols_state_what_an_encoding_must_give():
    class Half(
        LinearSlopes,
        RelativeTables,
        InputBias,
        ScoreBias,
        InvariantBelow,
        InputTransforms,
        ScoreWeights,
    ):
        pass

    half = Half()
    calls = [
        lambda: half.linear_slopes(True),
        lambda: half.relative_tables(),
        lambda: half.adds_to_values,
        lambda: half.value_term(torch.zeros(1), None, None),
        lambda: half.clock(torch.zeros(1, 2, 4)),
        lambda: half.score_bias(torch.zeros(1), torch.zeros(1), None),
        lambda: half.invariant_below(),
        lambda: half.transforms(torch.zeros(1, 2, 4)),
        lambda: half.score_weights(torch.zeros(1), torch.ones(1).bool(), torch.ones(1).bool()),
    ]
    for call in calls:
        with pytest.raises(NotImplementedError):
            call()


def test_alibi_is_linear_in_the_distance_as_it_declares():
    alibi = posenc.create("alibi", n_heads=4)
    slopes = torch.tensor(alibi.linear_slopes(causal=True))
    q, k = torch.arange(6), torch.arange(6)
    expected = -slopes.view(-1, 1, 1) * (q.view(1, -1, 1) - k.view(1, 1, -1)).float()
    causal = k.view(1, -1) <= q.view(-1, 1)
    torch.testing.assert_close(alibi.bias(q, k)[:, causal], expected[:, causal])
