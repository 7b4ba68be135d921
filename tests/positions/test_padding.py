"""posenc.positions.padding: the positions and checked masks of padded and packed rows,
against Hugging Face's ``cumsum - 1`` convention, hand-written rows and a naive count."""

import pytest
import torch

from posenc.positions import (
    check_padding_mask,
    check_segment_ids,
    document_starts,
    from_padding,
    from_segments,
)


def test_from_padding_counts_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0], [1, 0, 1, 0, 1]])
    expected = [[0, 0, 0, 1, 2], [0, 1, 2, 3, 0], [0, 0, 1, 0, 2]]
    assert from_padding(mask).tolist() == expected
    assert from_padding(mask.bool()).tolist() == expected
    # Hugging Face's convention: cumsum - 1 on real tokens
    hf = mask.cumsum(-1) - 1
    assert torch.equal(from_padding(mask)[mask.bool()], hf[mask.bool()])


def test_from_segments_restarts_in_every_document():
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [5, 5, 5, 5, 5, 5, 7, 7]])
    assert from_segments(ids).tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 2, 3, 4, 5, 0, 1]]
    real = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1, 1, 1]])
    assert from_segments(ids, real).tolist() == [
        [0, 1, 2, 0, 1, 0, 1, 0],
        [0, 0, 0, 1, 2, 3, 0, 1],
    ]
    # one document and padding: the positions of from_padding
    assert torch.equal(from_segments(torch.zeros_like(real), real), from_padding(real))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: from_segments(torch.tensor([[0, 1, 0]])), ValueError, "reappears"),
        (lambda: from_segments(torch.zeros(1, 3)), TypeError, "segment_ids must be an integer"),
        (lambda: from_segments(torch.zeros(3, dtype=torch.long)), ValueError, r"\[batch, seq\]"),
        (
            lambda: from_segments(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 4)),
            TypeError,
            "attention_mask must be a bool or integer",
        ),
        (
            lambda: from_segments(
                torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 4, dtype=torch.long)
            ),
            ValueError,
            "must match",
        ),
        (lambda: from_padding(torch.tensor([[0, 2, 1]])), ValueError, "only 0 .* and 1"),
        (lambda: from_padding([[1, 1]]), TypeError, "attention_mask must be a torch.Tensor"),
        (
            lambda: from_segments(
                torch.zeros(1, 3, dtype=torch.long, device="meta"), torch.ones(1, 3).bool()
            ),
            ValueError,
            "attention_mask is on cpu but segment_ids on meta",
        ),
        (lambda: document_starts([[0, 1]]), TypeError, "segment_ids must be a torch.Tensor"),
        (lambda: document_starts(torch.zeros(1, 2) * 1j), TypeError, "must be an integer"),
        (lambda: check_segment_ids(torch.zeros(1, 2).long(), name=None), TypeError, "name"),
    ],
)
def test_bad_position_helpers(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_check_padding_mask_returns_bool():
    """0/1 integers become bool (True = a real token); a bool mask is returned as it is."""
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]], dtype=torch.uint8)
    checked = check_padding_mask(mask)
    assert checked.dtype == torch.bool
    assert checked.tolist() == [[False, True, True], [True, True, False]]
    as_bool = mask.bool()
    assert check_padding_mask(as_bool) is as_bool


def test_check_padding_mask_reads_no_values_on_meta():
    """On the meta device there are no values to check: the dtype and shape checks run."""
    meta = torch.full((2, 3), 7, dtype=torch.long, device="meta")
    assert check_padding_mask(meta).dtype == torch.bool
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        check_padding_mask(torch.ones(2, 3, 1, dtype=torch.bool, device="meta"))


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        (torch.ones(2, 3), TypeError, "mask must be a bool or integer"),
        (torch.ones(2, 3, dtype=torch.complex64), TypeError, "bool or integer"),
        (torch.ones(3, dtype=torch.bool), ValueError, r"mask must be \[batch, seq\], got shape"),
        (torch.tensor([[1, -1]]), ValueError, "only 0 .* and 1"),
        (None, TypeError, "mask must be a torch.Tensor, got NoneType"),
    ],
)
def test_bad_padding_masks_name_the_parameter(mask, error, match):
    with pytest.raises(error, match=match):
        check_padding_mask(mask, name="mask")


def test_check_segment_ids_returns_them_unchanged():
    for dtype in (torch.uint8, torch.int32, torch.long):
        ids = torch.tensor([[0, 0, 1]], dtype=dtype)
        assert check_segment_ids(ids) is ids


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (torch.zeros(1, 3, dtype=torch.bool), TypeError, "ids must be an integer tensor"),
        (torch.zeros(1, 3), TypeError, "ids must be an integer tensor"),
        (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"ids must be \[batch, seq\]"),
        ([[0, 1]], TypeError, "ids must be a torch.Tensor, got list"),
    ],
)
def test_bad_segment_ids_name_the_parameter(ids, error, match):
    with pytest.raises(error, match=match):
        check_segment_ids(ids, name="ids")


def test_from_segments_of_a_single_token_and_of_ids_in_any_order():
    """Ids need not increase, only stay in runs; a one-token row is position 0."""
    assert from_segments(torch.tensor([[4]])).tolist() == [[0]]
    assert from_segments(torch.tensor([[9, 9, 2, 5, 5, 5]])).tolist() == [[0, 1, 0, 0, 1, 2]]


def test_from_segments_equals_a_naive_count():
    """Every document counts its real tokens from 0 and pads get 0: a loop over the row."""
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 5, (6,), generator=generator)
    ids = torch.repeat_interleave(torch.arange(6), lengths)[None]  # [1, seq]
    real = torch.rand(ids.shape, generator=generator) > 0.3
    expected, count, previous = [], 0, None
    for i, r in zip(ids[0].tolist(), real[0].tolist(), strict=True):
        count = 0 if i != previous else count
        previous = i
        expected.append(count if r else 0)
        count += r
    assert from_segments(ids, real).tolist() == [expected]


def test_from_padding_equals_from_segments_of_one_document():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(
        from_padding(mask), from_segments(torch.zeros(2, 4, dtype=torch.int32), mask)
    )
