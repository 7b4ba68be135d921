"""posenc.models.inputs: token ids and masks are checked, named, and never clamped."""

from __future__ import annotations

import pytest
import torch

from posenc.models.inputs import check_input_ids, check_mask, check_masks


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.uint16])
def test_integer_ids_come_back_as_int64(dtype):
    ids = torch.tensor([[0, 3, 9]], dtype=dtype)
    out = check_input_ids(ids, vocab_size=10)
    assert out.dtype == torch.int64 and out.tolist() == [[0, 3, 9]]


@pytest.mark.parametrize(
    ("ids", "error", "named"),
    [
        ([[0, 1]], TypeError, "torch.Tensor"),
        (torch.zeros(1, 2), TypeError, "integer"),
        (torch.zeros(1, 2, dtype=torch.bool), TypeError, "integer"),
        (torch.zeros(3, dtype=torch.long), ValueError, r"\[batch, seq\]"),
        (torch.zeros(2, 0, dtype=torch.long), ValueError, "seq >= 1"),
        (torch.tensor([[0, 10]]), ValueError, "vocab_size=10"),
        (torch.tensor([[-1, 0]]), ValueError, "got -1"),
    ],
)
def test_bad_ids_are_named(ids, error, named):
    with pytest.raises(error, match=named):
        check_input_ids(ids, vocab_size=10)


@pytest.mark.parametrize("bad", [2**53 + 1, 2**62 + 3, -(2**60) - 1, 10, -1])
def test_an_id_out_of_range_is_named_exactly_at_any_magnitude(bad):
    """The bounds are read as float64 (one cast); an id that float64 rounds is read
    again, exactly, for the message."""
    # three ids (their bounds are read), two and one (read as they are)
    for ids in ([[0, bad, 3]], [[bad], [0]], [[bad]]):
        with pytest.raises(ValueError, match=rf"vocab_size=10\), got {bad}$"):
            check_input_ids(torch.tensor(ids), vocab_size=10)
    assert check_input_ids(torch.tensor([[0, 9]]), vocab_size=10).tolist() == [[0, 9]]


def test_ids_on_the_meta_device_are_not_read():
    ids = torch.empty(2, 3, dtype=torch.long, device="meta")
    assert check_input_ids(ids, vocab_size=10).device.type == "meta"


def test_masks_cover_the_cached_tokens_and_the_new_ones():
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert check_mask("attention_mask", mask, 2, 3).dtype == torch.bool
    ids = torch.tensor([[0, 0, 1]])
    assert torch.equal(check_mask("segment_ids", ids, 1, 3), ids)
    with pytest.raises(
        ValueError, match=r"attention_mask must be \[batch, past \+ seq\] = \[2, 5\]"
    ):
        check_mask("attention_mask", mask, 2, 5)
    with pytest.raises(ValueError, match="segment_ids"):
        check_mask("segment_ids", ids, 2, 3)


def test_masks_together():
    mask, ids = torch.ones(1, 2, dtype=torch.bool), torch.tensor([[0, 1]])
    assert check_masks(None, None, 1, 2) is None
    got = check_masks(mask, None, 1, 2)
    assert got is not None and torch.equal(got[0], mask) and got[1] is None
    got = check_masks(None, ids, 1, 2)
    assert got is not None and got[0] is None and torch.equal(got[1], ids)
    with pytest.raises(ValueError, match="segment_ids"):
        check_masks(mask, ids[:, :1], 1, 2)
