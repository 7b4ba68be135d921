"""Grid encodings' math: MAE's 2-D sin-cos (He et al. 2021, arXiv:2111.06377) against a loop
over rows, columns and channels; learned-table indices and resampling."""

import math

import pytest
import torch

from posenc.functional import GRID_ORDERS, grid_table_index, resample_grid_table, sincos_2d


def reference_sincos_2d(coords, dim, base, order):
    """MAE's get_2d_sincos_pos_embed_from_grid for each (row, col), as a loop."""
    quarter = dim // 4
    out = torch.empty(len(coords), dim, dtype=torch.float64)
    for s, (row, col) in enumerate(coords):
        halves = (row, col) if order == "row_col" else (col, row)
        for h, a in enumerate(halves):
            for i in range(quarter):
                omega = base ** (-i / quarter)
                out[s, h * dim // 2 + i] = math.sin(a * omega)
                out[s, h * dim // 2 + quarter + i] = math.cos(a * omega)
    return out


@pytest.mark.parametrize("order", GRID_ORDERS)
@pytest.mark.parametrize("dim, base", [(8, 10000.0), (32, 100.0)])
def test_sincos_2d_matches_the_formula(order, dim, base, tol):
    coords = [(r, c) for r in range(3) for c in range(4)] + [(100, 7)]
    expected = reference_sincos_2d(coords, dim, base, order)
    got = sincos_2d(torch.tensor(coords), dim, base, order)
    assert got.dtype == torch.float32
    # float64 angles rounded to float32 before sin/cos (two roundings of up to 2π)
    torch.testing.assert_close(got.double(), expected, **tol(n=2, scale=2 * math.pi))
    got64 = sincos_2d(torch.tensor(coords, dtype=torch.float64), dim, base, order)
    torch.testing.assert_close(got64, expected, **tol(torch.float64, n=4, scale=100))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"dim": 6}, ValueError, "multiple of 4"),
        ({"dim": 8.0}, TypeError, "dim"),
        ({"dim": 8, "order": "xy"}, ValueError, "order"),
    ],
)
def test_sincos_2d_rejects_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sincos_2d(torch.zeros(2, 2), **kwargs)


def test_table_index_is_prefix_then_row_major():
    coords = torch.tensor([[r, c] for r in range(3) for c in range(4)])
    for prefix in (0, 1, 5):
        expected = torch.tensor([prefix + r * 4 + c for r in range(3) for c in range(4)])
        assert torch.equal(grid_table_index(coords, 4, prefix), expected)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resampling_to_the_same_grid_is_the_identity(mode):
    table = torch.randn(1 + 3 * 4, 6)
    assert torch.equal(resample_grid_table(table, (3, 4), (3, 4), prefix=1, mode=mode), table)


def test_resampling_keeps_prefix_rows_and_constant_channels(tol):
    h, w, dim = 3, 4, 5
    values = torch.randn(dim)
    table = torch.cat((torch.randn(2, dim), values.expand(h * w, dim)))
    new = resample_grid_table(table, (h, w), (6, 2), prefix=2)
    assert new.shape == (2 + 12, dim)
    assert torch.equal(new[:2], table[:2])
    # the filter's taps sum to 1: a constant image stays constant, up to the taps' roundings
    torch.testing.assert_close(
        new[2:], values.expand(12, dim), **tol(n=16, scale=values.abs().max())
    )


def test_resampling_bilinear_upsample_matches_a_loop(tol):
    """align_corners=False: output pixel o samples input (o + 0.5)·in/out - 0.5, clamped."""
    table = torch.arange(6.0).reshape(6, 1) ** 2  # a 2 x 3 grid, one channel
    new = resample_grid_table(table, (2, 3), (4, 6), mode="bilinear", antialias=False)
    image = table.reshape(2, 3).double()

    def sample(o, size_in, size_out):
        x = min(max((o + 0.5) * size_in / size_out - 0.5, 0.0), size_in - 1)
        lo = math.floor(x)
        hi = min(lo + 1, size_in - 1)
        return lo, hi, x - lo

    expected = torch.empty(4, 6, dtype=torch.float64)
    for r in range(4):
        r0, r1, fr = sample(r, 2, 4)
        for c in range(6):
            c0, c1, fc = sample(c, 3, 6)
            top = image[r0, c0] * (1 - fc) + image[r0, c1] * fc
            bottom = image[r1, c0] * (1 - fc) + image[r1, c1] * fc
            expected[r, c] = top * (1 - fr) + bottom * fr
    torch.testing.assert_close(new.double().reshape(4, 6), expected, **tol(n=8, scale=25))


def test_resampling_rejects_a_table_of_another_size():
    with pytest.raises(ValueError, match="prefix"):
        resample_grid_table(torch.zeros(12, 4), (3, 4), (2, 2), prefix=1)


def test_resample_grids_are_ordered_pairs_of_ints():
    table = torch.randn(4, 6)
    with pytest.raises(TypeError, match="grid must be a tuple of ints"):
        resample_grid_table(table, {2}, (3, 3))
    with pytest.raises(ValueError, match="new_grid must hold 2 ints"):
        resample_grid_table(table, (2, 2), (3,))
    with pytest.raises(TypeError, match="antialias must be a bool"):
        resample_grid_table(table, (2, 2), (3, 3), antialias="no")
