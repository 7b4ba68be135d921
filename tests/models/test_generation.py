"""posenc.models.generation: the next position, sampling and its temperature check.

The generate loop itself is tested through ``TransformerLM.generate`` in ``test_lm.py``
and ``test_packing.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.models import check_temperature, next_positions, sample


def test_next_positions():
    assert next_positions(torch.tensor([3, 4, 5])).tolist() == [6]
    assert next_positions(torch.tensor([[0, 1, 2], [0, 0, 0]])).tolist() == [[3], [1]]


def test_next_mrope_positions_continue_as_text_after_the_largest_of_any_axis():
    positions = torch.tensor(
        [[[0, 1, 2], [0, 1, 1]], [[0, 3, 3], [0, 1, 1]], [[0, 1, 7], [0, 1, 2]]]
    )
    expected = [[[8], [3]]] * 3  # one id per sequence, the same on every axis
    assert next_positions(positions).tolist() == expected


def test_zero_temperature_is_greedy():
    logits = torch.randn(5, 11)
    assert torch.equal(sample(logits), logits.argmax(dim=-1, keepdim=True))
    assert sample(logits).shape == (5, 1)


def test_sampling_is_the_softmax_at_the_temperature_and_seeded():
    logits, temperature = torch.randn(4, 9), 0.7
    ours = sample(logits, temperature, generator=torch.Generator().manual_seed(3))
    reference = torch.multinomial(
        torch.softmax(logits / temperature, dim=-1), 1, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(ours, reference)


def test_top_k_samples_among_the_k_best_only():
    logits = torch.randn(64, 20)
    best = logits.topk(3, dim=-1).indices
    drawn = sample(logits, 5.0, top_k=3, generator=torch.Generator().manual_seed(0))
    assert (drawn == best).any(dim=-1).all()
    assert torch.equal(sample(logits, 1.0, top_k=1), logits.argmax(dim=-1, keepdim=True))
    sample(logits, 1.0, top_k=50)  # more than the vocabulary: all of it


@pytest.mark.parametrize(
    ("temperature", "error"),
    [
        (-0.1, ValueError),
        (math.inf, ValueError),
        (math.nan, ValueError),
        (True, TypeError),
        ("1", TypeError),
    ],
)
def test_bad_temperatures_are_named(temperature, error):
    with pytest.raises(error, match="temperature"):
        check_temperature(temperature)
    with pytest.raises(error, match="temperature"):
        sample(torch.randn(2, 3), temperature)


def test_bad_top_k_is_named():
    with pytest.raises(ValueError, match="top_k"):
        sample(torch.randn(2, 3), 1.0, top_k=0)


@pytest.mark.parametrize(
    ("positions", "error"),
    [
        ([0, 1, 2], TypeError),
        (torch.tensor([True, False]), TypeError),
        (torch.tensor([1j]), TypeError),
        (torch.zeros(2, 0, dtype=torch.long), ValueError),
        (torch.zeros(1, 1, 1, 1, dtype=torch.long), ValueError),
    ],
)
def test_next_positions_names_bad_positions(positions, error):
    with pytest.raises(error, match="positions"):
        next_positions(positions)


@pytest.mark.parametrize(
    ("logits", "error"),
    [([[0.1, 0.2]], TypeError), (torch.tensor([[1, 2]]), TypeError), (torch.randn(3), ValueError)],
)
def test_sample_names_bad_logits(logits, error):
    with pytest.raises(error, match="logits"):
        sample(logits, 1.0)


def test_sampling_arguments_are_checked_at_every_temperature():
    """A huge or tiny temperature would make the scaled logits inf or 0/0 (NaN); top_k and
    the generator are checked even where greedy decoding does not read them."""
    for temperature in (1e300, 1e-300):
        with pytest.raises(ValueError, match="temperature"):
            check_temperature(temperature)
    with pytest.raises(ValueError, match="top_k"):
        sample(torch.randn(2, 3), 0.0, top_k=0)
    with pytest.raises(TypeError, match="generator"):
        sample(torch.randn(2, 3), 1.0, generator=0)  # type: ignore[arg-type]
