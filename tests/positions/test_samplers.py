"""posenc.positions.samplers: randomized positions (Ruoss et al. 2023) and PoSE (Zhu et al.
2024), by their definitions and their statistics, and usable with 1-D encodings."""

import itertools
import math

import pytest
import torch

import posenc
from posenc.config import MAX_POSITION
from posenc.models import TransformerLM
from posenc.positions import PositionSampler, pose, randomized, samplers


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_randomized_rows_are_sorted_distinct_subsets_below_max():
    p = randomized(64, 12, 40, generator=gen())
    assert p.shape == (64, 12) and p.dtype == torch.long
    assert bool((p.diff(dim=1) > 0).all()) and int(p.min()) >= 0 and int(p.max()) < 40
    # max_position == length leaves one subset: arange
    assert torch.equal(randomized(3, 7, 7, generator=gen()), torch.arange(7).expand(3, 7))


def test_randomized_draws_every_position_equally_often(draw):
    """Each of the N positions is in a row with probability L / N: over R rows its count is
    binomial(R, L/N); every count lies within 5 standard deviations of R L / N."""
    rows, length, n = 4000, 10, 50
    counts = torch.bincount(randomized(rows, length, n, generator=gen(1)).flatten(), minlength=n)
    p = length / n
    mean, std = rows * p, math.sqrt(rows * p * (1 - p))
    assert (counts.double() - mean).abs().max() < 5 * std


@pytest.fixture(params=["dense", "sparse"])
def draw(request, monkeypatch):
    """Both of randomized's draws: a random order of the whole range, and (with the dense
    range made 0) the sparse one it takes past DENSE_RANGE."""
    if request.param == "sparse":
        monkeypatch.setattr(samplers, "DENSE_RANGE", 0)
    return request.param


def test_randomized_draws_every_subset_equally_often(draw):
    """Each of the C(7, 3) = 35 subsets is a row's with probability 1/35: over R rows its
    count is binomial(R, 1/35); every count lies within 5 standard deviations of R / 35
    (marginals alone would pass a draw that favours some subsets)."""
    rows, length, n = 7000, 3, 7
    p = randomized(rows, length, n, generator=gen(2))
    assert bool((p.diff(dim=1) > 0).all()) and int(p.min()) >= 0 and int(p.max()) < n
    codes = (2**p).sum(dim=1)  # one integer per subset
    counts = torch.bincount(codes, minlength=2**n)[
        [sum(2**i for i in c) for c in _subsets(n, length)]
    ]
    prob = 1 / math.comb(n, length)
    mean, std = rows * prob, math.sqrt(rows * prob * (1 - prob))
    assert counts.sum() == rows and (counts.double() - mean).abs().max() < 5 * std


def _subsets(n, k):
    return itertools.combinations(range(n), k)


def test_randomized_reaches_the_documented_bound_without_the_range():
    """max_position up to 2**53: rows of distinct sorted positions, drawn without a
    ``[batch, max_position]`` tensor (which would need 70 TB at 2**44)."""
    for n in (2**44, MAX_POSITION):
        p = randomized(3, 64, n, generator=gen(5))
        assert p.shape == (3, 64) and p.dtype == torch.long
        assert bool((p.diff(dim=1) > 0).all()) and int(p.min()) >= 0 and int(p.max()) < n
        assert int(p.max()) > n // 2  # spread over the range, not packed at its start


def test_the_same_generator_gives_the_same_positions():
    for sampler in (PositionSampler("randomized", 100), PositionSampler("pose", 100, chunks=3)):
        assert torch.equal(sampler(4, 9, gen(3)), sampler(4, 9, gen(3)))
        assert not torch.equal(sampler(4, 9, gen(3)), sampler(4, 9, gen(4)))


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_pose_rows_are_chunks_of_consecutive_positions(chunks):
    """u_0 = 0, so every row starts at 0; inside a chunk the positions step by 1; between
    chunks they skip ahead (or not, when u_i = u_{i-1}); the last stays below max."""
    length, n = 16, 64
    p = pose(500, length, n, chunks=chunks, generator=gen())
    steps = p.diff(dim=1)
    assert bool((p[:, 0] == 0).all()) and bool((steps >= 1).all()) and int(p.max()) < n
    assert int((steps > 1).sum(dim=1).max()) <= chunks - 1
    if chunks == 1:
        assert torch.equal(p, torch.arange(length).expand(500, length))
    else:  # skips happen: PoSE covers positions past the row's own length
        assert int(p[:, -1].max()) > length


def test_pose_skip_is_uniform_between_zero_and_the_room():
    """Two chunks: u_1 is uniform on {0, ..., N - L}: its mean is (N - L) / 2 and every value
    turns up; the cut is uniform on 1..L-1."""
    rows, length, n = 6000, 8, 40
    p = pose(rows, length, n, chunks=2, generator=gen(2))
    skip = p[:, -1] - (length - 1)  # the last token is in the second chunk
    room = n - length
    mean, std = room / 2, math.sqrt(((room + 1) ** 2 - 1) / 12 / rows)
    assert abs(float(skip.double().mean()) - mean) < 5 * std
    assert set(skip.tolist()) == set(range(room + 1))
    jumped = (p.diff(dim=1) > 0) & (p.diff(dim=1) != 1)
    cut = jumped.long().argmax(dim=1)[skip > 0] + 1  # rows with a real skip
    assert set(cut.tolist()) == set(range(1, length))


def test_sampled_positions_drive_one_dimensional_encodings():
    """A model of each relative 1-D encoding runs on sampled positions and gives different
    logits than at arange (the positions reach the encoding); a learned table shorter than
    max_position raises its clear out-of-range error."""
    ids = torch.randint(0, 32, (2, 10))
    positions = PositionSampler("randomized", 200)(2, 10, gen())
    for encoding in ("rope", "alibi", "t5", "kerple", "fire", "xpos"):
        model = TransformerLM(32, 32, 1, 2, encoding=encoding)
        with torch.no_grad():
            for parameter in model.encoding.parameters():  # T5's table starts at zero
                parameter.normal_(generator=gen(5))
            out = model(ids, positions=positions)
            assert torch.isfinite(out).all() and not torch.allclose(out, model(ids)), encoding
    learned = TransformerLM(32, 32, 1, 2, encoding={"name": "learned", "max_positions": 64})
    with pytest.raises(posenc.positions.PositionOutOfRangeError):
        learned(ids, positions=positions)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: randomized(2, 10, 5), "max_position .5. must be >= length .10."),
        (lambda: pose(2, 3, 10, chunks=4), "chunks .4. must be <= length .3."),
        (lambda: randomized(0, 3, 10), "batch must be >= 1"),
        (lambda: PositionSampler("shuffle", 10), "kind must be one of"),
        (lambda: PositionSampler("pose", 0), "max_position must be >= 1"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_describe_names_the_sampler():
    assert PositionSampler("randomized", 640).describe() == "randomized below 640"
    assert PositionSampler("pose", 160, chunks=3).describe() == "pose 3 chunks below 160"
