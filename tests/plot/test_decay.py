import math

import numpy as np
import pytest
import torch

from posenc.functional import rope_inv_freq
from posenc.plot import save
from posenc.plot.decay import decay, decay_bound


def test_lines_are_the_bound_of_each_base_and_scaling():
    scalings = (None, {"rope_type": "linear", "factor": 4.0})
    fig = decay(head_dim=16, bases=(100.0, 10000.0), scalings=scalings, max_distance=50)
    (ax,) = fig.get_axes()
    lines = ax.get_lines()
    assert len(lines) == 4
    r = np.arange(1, 51)
    for line, (base, scaling) in zip(
        lines, [(b, s) for b in (100.0, 10000.0) for s in scalings], strict=True
    ):
        theta = rope_inv_freq(16, base, scaling)[0].numpy()
        # S_j = sum_{k<j} exp(i r theta_k), j = 1 .. d/2; the bound is the mean of |S_j|
        partial = np.cumsum(np.exp(1j * r[:, None] * theta[None, :]), axis=1)
        np.testing.assert_allclose(line.get_xdata(), r)
        np.testing.assert_allclose(line.get_ydata(), np.abs(partial).mean(1), rtol=1e-10)
    assert [line.get_label() for line in lines][1] == "base 100, linear ×4"
    assert ax.get_xscale() == "log" and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None and fig.get_suptitle()


def test_bound_at_zero_and_decays():
    theta = rope_inv_freq(128)[0]
    at = decay_bound(theta, torch.tensor([0.0, 1.0, 2000.0]))
    assert math.isclose(float(at[0]), 65 / 2)  # S_j = j: the mean of 1 .. 64
    assert at[2] < at[1] / 3


def test_defaults_and_files(tmp_path):
    fig = decay()
    lines = fig.get_axes()[0].get_lines()
    assert len(lines) == 4 and len(lines[0].get_xdata()) == 4096
    assert save(fig, tmp_path / "d.png").stat().st_size > 0
    assert save(fig, tmp_path / "d.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"head_dim": 7}, "head_dim"),
        ({"head_dim": 0}, "head_dim"),
        ({"bases": ()}, "bases"),
        ({"bases": (0.0,)}, "bases"),
        ({"bases": 10000.0}, "bases"),
        ({"scalings": ()}, "scalings"),
        ({"scalings": ("linear",)}, "scalings"),
        ({"scalings": ({"rope_type": "linear"},)}, "factor"),
        ({"scalings": ({"rope_type": "linear", "factor": 0.5},)}, "factor"),
        ({"scalings": ({"rope_type": "warp", "factor": 2.0},)}, "rope_type"),
        ({"max_distance": 0}, "max_distance"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        decay(**kwargs)
