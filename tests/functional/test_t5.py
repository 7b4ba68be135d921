"""T5 relative position buckets (Raffel et al. 2020, arXiv:1910.10683) against Mesh
TensorFlow's function, transcribed as a loop over scalar distances."""

import math

import pytest
import torch

from posenc.functional import t5_relative_bucket
from posenc.functional.t5 import check_t5_buckets


def reference_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """mesh_tensorflow.transformer.transformer_layers._relative_position_bucket, per scalar
    (float32 log, truncated, as the TF and Hugging Face code)."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    ratio = torch.tensor(n / max_exact, dtype=torch.float32)
    scaled = torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    return ret + min(max_exact + int(scaled.item()), num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20), (4, 3), (64, 1000)])
def test_buckets_match_mesh_tensorflow(bidirectional, num_buckets, max_distance):
    if not bidirectional and num_buckets == 4:
        num_buckets = 2
        max_distance = 3
    distance = torch.arange(-2 * max_distance - 5, 2 * max_distance + 6)
    expected = torch.tensor(
        [reference_bucket(d, bidirectional, num_buckets, max_distance) for d in distance.tolist()]
    )
    got = t5_relative_bucket(distance, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.int64
    assert torch.equal(got, expected)
    assert int(got.min()) >= 0 and int(got.max()) < num_buckets


def test_keys_after_the_query_share_bucket_zero_when_unidirectional():
    assert torch.equal(t5_relative_bucket(torch.arange(0, 50), False), torch.zeros(50).long())


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((3, 128, True), ValueError, "num_buckets"),
        ((31, 128, True), ValueError, "even"),
        ((1, 128, False), ValueError, "num_buckets"),
        ((32, 8, True), ValueError, "max_distance"),
        ((32.0, 128, True), TypeError, "num_buckets"),
        ((32, True, True), TypeError, "max_distance"),
    ],
)
def test_bad_settings_are_named(args, exc, match):
    with pytest.raises(exc, match=match):
        check_t5_buckets(*args)


def test_check_returns_the_buckets_per_direction():
    assert check_t5_buckets(32, 128, True) == 16
    assert check_t5_buckets(32, 128, False) == 32


@pytest.mark.parametrize("bad", [torch.zeros(3), torch.zeros(3, dtype=torch.bool)])
def test_bad_positions_are_rejected(bad):
    with pytest.raises(TypeError, match="integer"):
        t5_relative_bucket(bad)
