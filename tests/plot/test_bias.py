import numpy as np
import pytest
import torch

import posenc
from posenc.plot import save
from posenc.plot.bias import SHAW_HEAD_DIM, bias


def panels(fig):
    return [ax for ax in fig.get_axes() if ax.get_images()]


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
def test_each_panel_is_a_heads_bias(name):
    fig = bias(encoding=name, n_heads=4, length=6)
    torch.manual_seed(0)
    enc = posenc.create(name, n_heads=4)
    with torch.no_grad():
        expected = enc.bias(torch.arange(6), torch.arange(6)).numpy()
    axes = panels(fig)
    assert len(axes) == 4
    for h, ax in enumerate(axes):
        assert ax.get_title() == f"head {h}"
        assert ax.get_xlabel() and ax.get_ylabel()
        np.testing.assert_allclose(np.asarray(ax.get_images()[0].get_array()), expected[h])
    assert name in fig.get_suptitle()
    assert ("initialisation" in fig.get_suptitle()) == posenc.info(name).trainable


def test_shaw_is_drawn_for_fixed_random_queries():
    fig = bias(encoding="shaw", n_heads=2, length=5)
    torch.manual_seed(0)
    enc = posenc.create("shaw", n_heads=2, head_dim=SHAW_HEAD_DIM)
    q = torch.randn(1, 2, 5, SHAW_HEAD_DIM, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = enc.bias(torch.arange(5), torch.arange(5), q=q)[0].numpy()
    for h, ax in enumerate(panels(fig)):
        np.testing.assert_allclose(np.asarray(ax.get_images()[0].get_array()), expected[h])


def test_chosen_heads_share_one_colour_scale():
    fig = bias(encoding="alibi", n_heads=8, length=8, heads=[0, 7])
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["head 0", "head 7"]
    assert axes[0].get_images()[0].get_clim() == axes[1].get_images()[0].get_clim()
    assert len(fig.get_axes()) == 3  # two panels and one colour bar


def test_defaults_and_files(tmp_path):
    fig = bias()
    assert len(panels(fig)) == 8
    assert panels(fig)[0].get_images()[0].get_array().shape == (32, 32)
    assert save(fig, tmp_path / "b.png").stat().st_size > 0
    assert save(fig, tmp_path / "b.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"encoding": "rope"}, "takes bias encodings"),
        ({"encoding": "nope"}, "takes bias encodings"),
        ({"encoding": "unknown"}, "encoding"),
        ({"n_heads": 0}, "n_heads"),
        ({"length": 0}, "length"),
        ({"length": 2.0}, "length"),
        ({"heads": [8]}, "heads"),
        ({"heads": []}, "heads"),
        ({"heads": "0"}, "heads"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bias(**kwargs)
