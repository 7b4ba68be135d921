"""posenc.plot.grid: a patch's similarity on the grid, and M-RoPE's (t, h, w) ids."""

import pytest
import torch

import posenc
from posenc.plot.grid import grid, mrope_ids

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


def test_mrope_ids_are_drawn():
    """text 4, image 2x3, video 2x2x2, text 4: the rules of Qwen2-VL's ids."""
    fig = mrope_ids()
    ax, data = _image(fig)
    text = [0, 1, 2, 3]
    after = [9, 10, 11, 12]
    expected = [
        text + [4] * 6 + [7] * 4 + [8] * 4 + after,
        text + [4, 4, 4, 5, 5, 5] + [7, 7, 8, 8] * 2 + after,
        text + [4, 5, 6] * 2 + [7, 8] * 4 + after,
    ]
    assert data.tolist() == expected
    assert "M-RoPE" in _title(fig) and ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["t", "h", "w"]


def test_mrope_ids_without_text():
    _, data = _image(mrope_ids(text=0, image=(1, 2), video=(1, 1, 1)))
    assert data.tolist() == [[0, 0, 2], [0, 0, 2], [0, 1, 2]]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_saves(tmp_path, suffix):
    from posenc.plot.common import save

    for i, fig in enumerate((grid(grid=(3, 3), patch=(1, 1), dim=16), mrope_ids())):
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


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"text": -1}, "text"),
        ({"image": (2,)}, "image"),
        ({"image": (2, 0)}, "image"),
        ({"video": (0, 1, 1)}, "video"),
        ({"video": "abc"}, "video"),
    ],
)
def test_mrope_ids_bad_input(kwargs, word):
    with pytest.raises(ValueError, match=word):
        mrope_ids(**kwargs)
