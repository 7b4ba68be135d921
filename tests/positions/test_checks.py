"""posenc.positions.checks: what check_positions returns and rejects, the batch check, the
default positions, the causal mask and position_at, against naive loops and hand-written
values."""

import pytest
import torch

from posenc.config import MAX_POSITION
from posenc.positions import (
    PositionOutOfRangeError,
    arange,
    causal_mask,
    check_batch,
    check_positions,
    position_at,
)

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32]


# check_positions: what it returns --------------------------------------------------------


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_integer_positions_become_int64_with_their_values(dtype):
    """Every integer dtype comes back as int64, so that ``i - j`` cannot wrap (uint8)."""
    positions = torch.tensor([0, 1, 7, 100], dtype=dtype)
    out = check_positions(positions)
    assert out.dtype == torch.int64
    assert out.tolist() == [0, 1, 7, 100]
    assert (out[:1] - out[1:]).tolist() == [-1, -7, -100]  # no wrap


def test_large_unsigned_positions_stay_exact():
    positions = torch.tensor([0, 2**32 - 1], dtype=torch.uint32)
    assert check_positions(positions).tolist() == [0, 2**32 - 1]
    positions = torch.tensor([2**53], dtype=torch.uint64)
    assert check_positions(positions).tolist() == [2**53]


@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.float32, torch.float64])
def test_int64_and_float_positions_are_returned_as_they_are(dtype):
    positions = torch.tensor([0, 1.5, 3]).to(dtype) if dtype.is_floating_point else torch.arange(3)
    assert check_positions(positions) is positions


def test_empty_and_meta_positions_skip_the_value_checks():
    """No values to read: shapes and dtypes are still checked, values are not."""
    empty = torch.zeros(0, dtype=torch.uint8)
    out = check_positions(empty)
    assert out.dtype == torch.int64 and out.shape == (0,)
    meta = torch.full((4,), -1, dtype=torch.int16, device="meta")  # negative, not read
    out = check_positions(meta, limit=2)
    assert out.dtype == torch.int64 and out.device.type == "meta"
    with pytest.raises(ValueError, match="must be 1-D or 2-D"):
        check_positions(torch.zeros(1, 1, 1, device="meta"))


def test_grid_coordinates_and_negative_values():
    coords = torch.tensor([[0, 0], [-1, 2]], dtype=torch.int32)
    out = check_positions(coords, axes=2, nonnegative=False, seq_len=2)
    assert out.dtype == torch.int64 and out.tolist() == [[0, 0], [-1, 2]]
    batched = torch.zeros(3, 5, 2)
    assert check_positions(batched, axes=2, seq_len=5) is batched


# check_positions: what it rejects --------------------------------------------------------


@pytest.mark.parametrize(
    ("positions", "kwargs", "error", "match"),
    [
        ([0, 1], {}, TypeError, "pos must be a torch.Tensor, got list"),
        (torch.zeros(2, dtype=torch.bool), {}, TypeError, "integer or floating tensor, got"),
        (torch.zeros(2, dtype=torch.complex64), {}, TypeError, "integer or floating tensor"),
        (torch.zeros(2), {"integer": True}, TypeError, "pos must be integer for this encoding"),
        (torch.zeros(2, 2, 2), {}, ValueError, r"pos must be 1-D or 2-D, got shape \(2, 2, 2\)"),
        (torch.zeros(2, 2), {"ndims": (1,)}, ValueError, "pos must be 1-D, got shape"),
        (torch.zeros(4), {"axes": 2}, ValueError, r"pos must be \[seq, 2\] or \[batch, seq, 2\]"),
        (torch.zeros(4, 3), {"axes": 2}, ValueError, r"e\.g\. posenc\.positions\.grid"),
        (torch.zeros(4), {"seq_len": 5}, ValueError, "4 positions in its last dimension .* 5"),
        (torch.zeros(4, 2), {"seq_len": 5, "axes": 2}, ValueError, r"4 positions \(rows\)"),
        (torch.zeros(2), {"device": "meta"}, ValueError, "pos is on cpu but the input is on meta"),
        (torch.tensor([0.0, float("nan")]), {}, ValueError, "pos must be finite"),
        (torch.tensor([0.0, float("-inf")]), {"nonnegative": False}, ValueError, "finite"),
        (torch.tensor([0, -1]), {}, ValueError, "pos must be >= 0, got -1"),
        (torch.tensor([2**53 + 1]), {}, ValueError, r"within \[-9007199254740992, "),
        (torch.tensor([-(2**53) - 1]), {"nonnegative": False}, ValueError, "got -9.007"),
        (torch.tensor([2**63], dtype=torch.uint64), {}, ValueError, "got values >= 2\\*\\*63"),
    ],
)
def test_bad_positions_name_the_parameter(positions, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_positions(positions, name="pos", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seq_len": "4"}, TypeError, "seq_len must be an int, got str"),
        ({"seq_len": -1}, ValueError, "seq_len must be >= 0"),
        ({"name": None}, TypeError, "name must be a str, got NoneType"),
        ({"integer": "no"}, TypeError, "integer must be a bool"),
        ({"limit": 1.5}, TypeError, "limit must be an int"),
        ({"limit": 2**70}, ValueError, "limit must be <= 9007199254740992"),
        ({"limit_name": 1}, TypeError, "limit_name must be a str"),
        ({"ndims": "x"}, TypeError, "ndims must be a tuple of ints"),
        ({"ndims": {1, 2}}, TypeError, "ndims must be a tuple of ints, got set"),
        ({"axes": -1}, ValueError, "axes must be >= 1"),
        ({"nonnegative": 1}, TypeError, "nonnegative must be a bool"),
        ({"device": 1}, TypeError, "device must be a torch.device"),
        ({"device": "no-such-cpu"}, ValueError, "device must name a torch device"),
    ],
)
def test_bad_arguments_of_check_positions_are_named(kwargs, error, match):
    """The arguments beside the positions are refused by name, never compared as they come
    (a string length was 'the sequence has 4 positions but ...', a bool axes accepted)."""
    with pytest.raises(error, match=match):
        check_positions(torch.arange(4), **kwargs)


def test_the_largest_positions_pass():
    edge = torch.tensor([-MAX_POSITION, MAX_POSITION], dtype=torch.float64)
    assert check_positions(edge, nonnegative=False) is edge
    assert check_positions(torch.tensor([MAX_POSITION])).tolist() == [MAX_POSITION]


def test_a_position_at_the_limit_raises_the_out_of_range_error():
    check_positions(torch.tensor([0, 7]), limit=8)
    with pytest.raises(PositionOutOfRangeError) as caught:
        check_positions(torch.tensor([3, 9, 8]), limit=8, limit_name="max_len")
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.position, error.limit, error.limit_name) == (9, 8, "max_len")
    assert str(error) == (
        "position 9 is out of range: this encoding has max_len=8, so positions must be in [0, 7]"
    )


def test_value_checks_are_skipped_while_compiling(monkeypatch):
    """A data-dependent branch would break torch.compile's graph: only shapes are checked."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    out = check_positions(torch.tensor([-5, 100], dtype=torch.int8), limit=3)
    assert out.dtype == torch.int64 and out.tolist() == [-5, 100]


# check_batch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axes"), [((5,), 1), ((1, 5), 1), ((3, 5), 1), ((5, 2), 2), ((1, 5, 2), 2)]
)
def test_check_batch_accepts_shared_and_matching_positions(shape, axes):
    check_batch(torch.zeros(shape), 3, axes=axes)


@pytest.mark.parametrize(("shape", "axes"), [((2, 5), 1), ((4, 5), 1), ((2, 5, 2), 2)])
def test_check_batch_names_the_batch_sizes(shape, axes):
    with pytest.raises(ValueError, match=f"ids has batch size {shape[0]} but the input has 3"):
        check_batch(torch.zeros(shape), 3, name="ids", axes=axes)


# arange, position_at, causal_mask ---------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: arange("4"), TypeError, "seq_len must be an int"),
        (lambda: arange(4, offset=-1), ValueError, "offset must be >= 0"),
        (lambda: arange(4, device=1), TypeError, "device must be a torch.device"),
        (lambda: check_batch([0, 1], 1), TypeError, "positions must be an integer or floating"),
        (lambda: check_batch(torch.arange(2), 1.5), TypeError, "batch must be an int"),
        (lambda: causal_mask(torch.arange(2) * 1j, torch.arange(2)), TypeError, "q_positions"),
        (
            lambda: causal_mask(torch.arange(2), torch.arange(2, device="meta")),
            ValueError,
            "q_positions is on cpu but k_positions on meta",
        ),
    ],
)
def test_helpers_name_a_bad_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_arange_is_int64_from_the_offset():
    out = arange(4, offset=3)
    assert out.dtype == torch.int64 and out.tolist() == [3, 4, 5, 6]
    assert arange(0).shape == (0,)
    assert arange(2, device="meta").device.type == "meta"


def test_position_at_reads_the_default_shared_or_batched_positions():
    b = torch.tensor([0, 1, 1])
    index = torch.tensor([2, 0, 1])
    assert position_at(None, b, index).tolist() == [2, 0, 1]
    assert position_at(None, b, index, offset=5).tolist() == [7, 5, 6]
    shared = torch.tensor([10, 20, 30])
    assert position_at(shared, b, index).tolist() == [30, 10, 20]
    batched = torch.tensor([[10, 20, 30], [40, 50, 60]])
    assert position_at(batched, b, index).tolist() == [30, 40, 50]


def _naive_causal(q_positions, k_positions):
    return [[k <= q for k in k_positions] for q in q_positions]


def test_causal_mask_equals_a_naive_loop():
    q, k = torch.arange(4), torch.arange(4)
    assert causal_mask(q, k).tolist() == _naive_causal(q.tolist(), k.tolist())
    # decoding: two new queries after three cached keys
    q, k = torch.tensor([3, 4]), torch.arange(5)
    mask = causal_mask(q, k)
    assert mask.shape == (2, 5) and mask.dtype == torch.bool
    assert mask.tolist() == _naive_causal(q.tolist(), k.tolist())


def test_causal_mask_of_batched_positions_has_a_head_axis():
    q = torch.tensor([[0, 1, 2], [5, 6, 7]])
    k = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    mask = causal_mask(q, k)
    assert mask.shape == (2, 1, 3, 4)  # [b, 1, q_len, k_len]
    for row in range(2):
        assert mask[row, 0].tolist() == _naive_causal(q[row].tolist(), k[row].tolist())
    shared_k = causal_mask(q, torch.arange(4))  # [b, q] with [k]
    assert shared_k.shape == (2, 1, 3, 4)
    assert shared_k[1, 0].all()


def test_check_batch_holds_under_compile_with_a_dynamic_batch():
    """A batch made dynamic (a recompile at another batch size) and positions of a static
    batch: dynamo answers ``2 in (1, s0)`` False, which raised "batch size 2 but the input
    has 2" inside a compiled decode; the check compares one size at a time."""

    def body(positions, q):
        check_batch(positions, q.shape[0], "k_positions")
        return q + 1

    q = torch.ones(2, 3)
    torch._dynamo.maybe_mark_dynamic(q, 0)
    compiled = torch.compile(body, fullgraph=True, dynamic=False)
    assert torch.equal(compiled(torch.zeros(2, 5, dtype=torch.long), q), q + 1)
