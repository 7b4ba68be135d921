import math

import numpy as np
import pytest

from posenc.functional import ROPE_SCALINGS
from posenc.plot import save
from posenc.plot.frequencies import NAMED_SCALINGS, frequencies, named_scaling


def scaling_lines(ax):
    return [line for line in ax.get_lines() if line.get_label() in NAMED_SCALINGS]


@pytest.mark.parametrize("head_dim", [16, 128])
def test_lines_are_the_wavelengths_of_each_scaling(head_dim):
    fig = frequencies(
        head_dim=head_dim, base=500000.0, original=1024, target=8192, scalings=NAMED_SCALINGS
    )
    (ax,) = fig.get_axes()
    lines = scaling_lines(ax)
    assert [line.get_label() for line in lines] == list(NAMED_SCALINGS)
    for line, name in zip(lines, NAMED_SCALINGS, strict=True):
        params = named_scaling(name, head_dim, 1024, 8192)
        fn = ROPE_SCALINGS[params.pop("rope_type")]
        inv_freq, _ = fn(head_dim, head_dim, 500000.0, 8192, None, **params)
        np.testing.assert_allclose(line.get_xdata(), np.arange(head_dim // 2))
        np.testing.assert_allclose(line.get_ydata(), 2 * math.pi / inv_freq.numpy())
    assert ax.get_yscale() == "log" and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None and fig.get_suptitle()


def test_context_lines_and_known_shapes():
    fig = frequencies(head_dim=64, original=4096, target=16384)
    ax = fig.get_axes()[0]
    levels = {line.get_ydata()[0] for line in ax.get_lines() if len(line.get_ydata()) == 2}
    assert levels == {4096, 16384}
    by_name = {line.get_label(): line.get_ydata() for line in scaling_lines(ax)}
    np.testing.assert_allclose(by_name["linear"], by_name["none"] * 4)  # θ / factor
    for name in ("ntk", "yarn", "llama3", "longrope"):  # the fastest pair is kept
        assert math.isclose(by_name[name][0], 2 * math.pi)
        assert by_name[name][-1] > by_name["none"][-1]


def test_a_checkpoints_dict_is_drawn_as_given():
    params = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 512}
    fig = frequencies(head_dim=8, original=512, target=1024, scalings=[params])
    (line,) = scaling_lines(fig.get_axes()[0])
    inv_freq, _ = ROPE_SCALINGS["yarn"](
        8, 8, 10000.0, 1024, None, factor=2.0, original_max_position_embeddings=512
    )
    np.testing.assert_allclose(line.get_ydata(), 2 * math.pi / inv_freq.numpy())


def test_defaults_and_files(tmp_path):
    fig = frequencies()
    assert len(scaling_lines(fig.get_axes()[0])) == 6
    assert save(fig, tmp_path / "f.png").stat().st_size > 0
    assert save(fig, tmp_path / "f.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"head_dim": 9}, "head_dim"),
        ({"base": -1.0}, "base"),
        ({"original": 0}, "original"),
        ({"target": 4096}, "target"),
        ({"target": "big"}, "target"),
        ({"scalings": ()}, "scalings"),
        ({"scalings": "linear"}, "scalings"),
        ({"scalings": ("warp",)}, "scalings"),
        ({"scalings": (3,)}, "scalings"),
        ({"scalings": ({"rope_type": "linear"},)}, "factor"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        frequencies(**kwargs)
