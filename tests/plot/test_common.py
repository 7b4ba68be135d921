import subprocess
import sys

import pytest

from posenc.plot import PLOTS, get, save
from posenc.plot.common import check_encoding, new_figure


def test_importing_posenc_plot_does_not_import_matplotlib():
    code = "import posenc, posenc.plot, sys; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registry_names_every_figure():
    assert list(PLOTS) == [
        *("permutation", "heatmap", "rotation", "bias", "decay", "frequencies"),
        *("similarity", "grid", "mrope-ids", "attention"),
    ]
    assert PLOTS["mrope-ids"] == "multimodal"


@pytest.mark.parametrize("name", ["permutation", "heatmap", "rotation"])
def test_get_returns_the_figure_function(name):
    draw = get(name)
    assert draw.__name__ == name
    assert draw().get_axes()


def test_get_unknown_lists_the_names():
    with pytest.raises(ValueError, match="heatmap"):
        get("nope")


def test_new_figure_panels_title_white():
    fig, axes = new_figure(3, "a title")
    assert len(axes) == 3 and fig.get_axes() == axes
    assert fig.get_suptitle() == "a title"
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="n_panels"):
        new_figure(0)


def test_new_figure_names_the_extra_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'posenc\[plot\]'"):
        new_figure()


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_save_writes_png_and_svg_without_urls(tmp_path, suffix, magic):
    fig, (ax,) = new_figure(1, "t")
    ax.plot([0, 1], [1, 0])
    path = save(fig, tmp_path / "deep" / f"f{suffix}")
    data = path.read_bytes()
    assert data.startswith(magic)
    assert b"matplotlib.org" not in data


def test_save_rejects_other_suffixes(tmp_path):
    fig, _ = new_figure()
    with pytest.raises(ValueError, match=r"\.pdf"):
        save(fig, tmp_path / "f.pdf")
    assert not (tmp_path / "f.pdf").exists()


def test_check_encoding_kinds():
    assert check_encoding("rope", ["rotary"], "x").kind == "rotary"
    with pytest.raises(ValueError, match="takes additive encodings; 'alibi' is a bias"):
        check_encoding("alibi", ["additive"], "x")
    with pytest.raises(ValueError, match="2-D"):
        check_encoding("sincos_2d", ["additive"], "x")
    with pytest.raises(ValueError, match="encoding must be one of"):
        check_encoding("unknown", ["additive"], "x")


#: figures of a trained model: they need a run (tests/plot/test_attention.py draws them)
NEED_A_RUN = ("attention",)


@pytest.mark.parametrize("name", [name for name in PLOTS if name not in NEED_A_RUN])
def test_every_registered_figure_draws_with_its_defaults(name):
    from matplotlib.figure import Figure

    from posenc.plot import get

    fig = get(name)()
    assert isinstance(fig, Figure) and fig.get_axes()


def test_a_figure_of_a_trained_model_asks_for_a_run():
    from posenc.plot import get

    with pytest.raises(ValueError, match="run"):
        get("attention")()
