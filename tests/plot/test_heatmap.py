import numpy as np
import pytest
import torch

import posenc
from posenc.plot import save
from posenc.plot.heatmap import heatmap


@pytest.mark.parametrize("name", ["sinusoidal", "scaled_sinusoidal", "timestamp"])
def test_image_is_the_encoding_matrix(name):
    fig = heatmap(encoding=name, dim=32, positions=10)
    (ax,) = [ax for ax in fig.get_axes() if ax.get_images()]
    expected = posenc.create(name, dim=32).encode(torch.arange(10)).detach().numpy()
    np.testing.assert_array_equal(np.asarray(ax.get_images()[0].get_array()), expected)
    assert ax.get_xlabel() and ax.get_ylabel() and name in fig.get_suptitle()
    assert len(fig.get_axes()) == 2  # the image and its colour bar


def test_learned_is_at_initialisation():
    fig = heatmap(encoding="learned", dim=8, positions=4)
    assert "initialisation" in fig.get_suptitle()
    assert fig.get_axes()[0].get_images()[0].get_array().shape == (4, 8)


def test_default_is_the_articles_figure(tmp_path):
    fig = heatmap()
    assert fig.get_axes()[0].get_images()[0].get_array().shape == (50, 128)
    assert save(fig, tmp_path / "h.png").stat().st_size > 0
    assert save(fig, tmp_path / "h.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"encoding": "rope"}, "takes additive encodings"),
        ({"encoding": "sincos_2d"}, "2-D"),
        ({"dim": 0}, "dim"),
        ({"positions": 0}, "positions"),
        ({"positions": 2.5}, "positions"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        heatmap(**kwargs)
