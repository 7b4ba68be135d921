import math

import numpy as np
import pytest

from posenc.plot import save
from posenc.plot.rotation import rotation


def _tips(ax):
    lines = [line for line in ax.get_lines() if line.get_label().startswith("position")]
    return [line.get_label() for line in lines], np.array(
        [[line.get_xdata()[1], line.get_ydata()[1]] for line in lines]
    )


def test_rope_keeps_the_length_addition_does_not():
    fig = rotation(dim=8, pair=0, positions=(0, 1, 2, 4, 8))
    added, rotated = fig.get_axes()
    labels, a = _tips(added)
    _, r = _tips(rotated)
    assert labels == [f"position {p}" for p in (0, 1, 2, 4, 8)]
    norm = math.hypot(1.0, 0.5)  # the fixed vector's pair
    np.testing.assert_allclose(np.linalg.norm(r, axis=1), norm, rtol=1e-12)
    assert np.ptp(np.linalg.norm(a, axis=1)) > 0.5
    # addition: the tips lie at distance 1 from the vector, at (1 + sin pθ, 0.5 + cos pθ)
    p = np.array([0, 1, 2, 4, 8])
    np.testing.assert_allclose(a, np.stack([1 + np.sin(p), 0.5 + np.cos(p)], 1), atol=1e-12)
    # rotation: the angle grows by pθ_0 = p (θ_0 = 1)
    angles = np.unwrap(np.arctan2(r[:, 1], r[:, 0]) - math.atan2(0.5, 1.0))
    np.testing.assert_allclose(np.mod(angles, 2 * np.pi), np.mod(p, 2 * np.pi), atol=1e-9)
    for ax in (added, rotated):
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_higher_pairs_turn_slower():
    fig = rotation(dim=8, pair=3, positions=(0, 1))
    _, r = _tips(fig.get_axes()[1])
    turned = math.atan2(r[1, 1], r[1, 0]) - math.atan2(r[0, 1], r[0, 0])
    assert turned == pytest.approx(10000 ** (-6 / 8), rel=1e-9)


def test_writes_files(tmp_path):
    fig = rotation()
    assert save(fig, tmp_path / "r.png").read_bytes().startswith(b"\x89PNG")
    assert save(fig, tmp_path / "r.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dim": 7}, "dim"),
        ({"pair": 4}, "pair"),
        ({"positions": ()}, "positions"),
        ({"positions": (0, -1)}, "positions"),
        ({"base": 0.0}, "base"),
        ({"base": "x"}, "base"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rotation(**kwargs)
