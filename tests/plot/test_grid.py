"""posenc.plot.grid: a patch's similarity on the grid."""

import pytest
import torch

import posenc
from posenc.plot.grid import grid

pytest.importorskip("matplotlib")

GRID_ENCODINGS = ["learned_2d", "rope_2d", "rope_mixed", "sincos_2d"]


def _title(fig):
    titles = [fig._suptitle.get_text()] if fig._suptitle else []
    return " ".join(titles + [ax.get_title() for ax in fig.get_axes()])


def _image(fig):
    (ax,) = [ax for ax in fig.get_axes() if ax.get_images()]
    return ax, torch.as_tensor(ax.get_images()[0].get_array().data)


def test_sincos_2d_is_the_cosine_to_the_patch():
    _, data = _image(grid("sincos_2d", grid=(4, 5), patch=(1, 3), dim=32))
    e = posenc.create("sincos_2d", dim=32).encode(posenc.positions.grid(4, 5)).double()
    e = e / e.norm(dim=-1, keepdim=True)
    expected = (e @ e[1 * 5 + 3]).reshape(4, 5)
    torch.testing.assert_close(data.double(), expected, atol=1e-5, rtol=0)


def test_rope_2d_peaks_at_the_patch():
    _, data = _image(grid("rope_2d", grid=(6, 7), patch=(2, 5), dim=16))
    assert data.shape == (6, 7)
    assert float(data[2, 5]) == pytest.approx(1.0, abs=1e-5)
    assert int(data.argmax()) == 2 * 7 + 5


@pytest.mark.parametrize("name", GRID_ENCODINGS)
def test_every_grid_encoding_renders(name):
    fig = grid(name, grid=(3, 4), patch=(0, 0), dim=16)
    ax, data = _image(fig)
    assert data.shape == (3, 4) and bool(torch.isfinite(data).all())
    assert name in _title(fig) and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None


def test_the_list_of_grid_encodings():
    from posenc.plot.grid import grid_encodings

    assert grid_encodings() == GRID_ENCODINGS


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_saves(tmp_path, suffix):
    from posenc.plot.common import save

    for i, fig in enumerate((grid(grid=(3, 3), patch=(1, 1), dim=16),)):
        assert save(fig, tmp_path / f"f{i}{suffix}").stat().st_size > 0


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"encoding": "sinusoidal"}, "sincos_2d"),
        ({"encoding": "nonesuch"}, "2-D encodings"),
        ({"grid": (8,)}, "grid"),
        ({"grid": (0, 8)}, "grid"),
        ({"patch": (8, 0)}, "patch"),
        ({"patch": (-1, 0)}, "patch"),
        ({"dim": 6}, "dim"),
    ],
)
def test_grid_bad_input(kwargs, word):
    with pytest.raises(ValueError, match=word):
        grid(**kwargs)
