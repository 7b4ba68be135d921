"""posenc.plot.similarity: the matrix drawn is each kind's similarity of positions i, j."""

import subprocess
import sys

import pytest
import torch

import posenc
from posenc.plot.similarity import similarity

pytest.importorskip("matplotlib")

#: the bias encodings whose default form is causal: keys after their query drawn blank
CAUSAL_FORMS = {"alibi", "t5", "cope", "fox", "stick_breaking", "path"}


def _title(fig):
    """The figure's title, as a suptitle or on its axes."""
    titles = [fig._suptitle.get_text()] if fig._suptitle else []
    return " ".join(titles + [ax.get_title() for ax in fig.get_axes()])


def _image(fig):
    (ax,) = [ax for ax in fig.get_axes() if ax.get_images()]
    return ax, torch.as_tensor(ax.get_images()[0].get_array().data)


def test_additive_is_the_cosine_of_the_encodings():
    _, data = _image(similarity("sinusoidal", positions=20, dim=32))
    e = posenc.create("sinusoidal", dim=32).encode(torch.arange(20)).double()
    e = e / e.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(data.double(), e @ e.T, atol=1e-5, rtol=0)


def test_rotary_is_the_relative_score_of_ones():
    """q = k = ones/sqrt(d): each pair contributes (2/d) cos((j - i) θ_k), θ_k = base^(-2k/d)."""
    d, n = 16, 24
    _, data = _image(similarity("rope", positions=n, dim=d))
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # [i, j] = j - i
    expected = (2 / d) * torch.cos(rel[..., None] * theta).sum(-1)
    torch.testing.assert_close(data.double(), expected, atol=1e-5, rtol=0)


def test_bias_is_head_zero_over_the_keys_a_causal_query_sees():
    fig = similarity("alibi", positions=12, dim=16)
    _, data = _image(fig)
    enc = posenc.create("alibi", n_heads=8)
    pos = torch.arange(12)
    future = torch.ones(12, 12, dtype=torch.bool).triu(1)
    expected = enc.bias(pos, pos)[0].masked_fill(future, float("nan"))
    torch.testing.assert_close(data.float(), expected, equal_nan=True)
    assert "(j > i) blank" in _title(fig)


def test_a_zero_table_is_drawn_random():
    """T5's table starts at zero (a blank image): drawn with init_std 1, seed 0."""
    fig = similarity("t5", positions=12, dim=16)
    _, data = _image(fig)
    torch.manual_seed(0)
    enc = posenc.create("t5", n_heads=8, init_std=1.0)
    pos = torch.arange(12)
    lower = torch.ones(12, 12, dtype=torch.bool).tril()
    torch.testing.assert_close(data.float()[lower], enc.bias(pos, pos)[0][lower])
    assert data[lower].std() > 0.1
    assert "random init: init_std=1, seed 0" in _title(fig)


def test_nope_is_constant():
    _, data = _image(similarity("nope", positions=8))
    assert torch.equal(data.float(), torch.ones(8, 8))


@pytest.mark.parametrize("name", posenc.available())
def test_every_encoding_renders(name):
    fig = similarity(name, positions=8, dim=16)
    ax, data = _image(fig)
    assert data.shape == (8, 8)
    if name in CAUSAL_FORMS:
        # FoX and CoPE define their bias for keys at or before their query only, ALiBi's and
        # T5's default forms are causal: blank above
        lower = torch.ones(8, 8, dtype=torch.bool).tril()
        assert bool(torch.isfinite(data[lower]).all()) and bool(data[~lower].isnan().all())
    else:
        assert bool(torch.isfinite(data).all())
    assert ax.get_xlabel() and ax.get_ylabel()
    assert name in _title(fig)
    assert len(fig.get_axes()) == 2  # the image and its colour bar


def test_learned_bias_says_initialisation():
    fig = similarity("kerple", positions=8, dim=16)
    assert "at initialisation, seed 0" in _title(fig)
    assert "blank" not in _title(fig)  # |i - j|: both directions drawn


def test_is_deterministic():
    a, b = (_image(similarity("learned", positions=8, dim=16))[1] for _ in range(2))
    assert torch.equal(a, b)


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_saves(tmp_path, suffix):
    from posenc.plot.common import save

    path = save(similarity(positions=8, dim=16), tmp_path / f"sim{suffix}")
    assert path.stat().st_size > 0


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"encoding": "nonesuch"}, "encoding"),
        ({"encoding": 3}, "encoding"),
        ({"positions": 0}, "positions"),
        ({"dim": 0}, "dim"),
        ({"dim": 6, "encoding": "rope_2d"}, "dim"),
    ],
)
def test_bad_input(kwargs, word):
    with pytest.raises(ValueError, match=word):
        similarity(**kwargs)


def test_import_needs_no_matplotlib():
    modules = "posenc.plot.similarity, posenc.plot.grid"
    code = f"import sys, {modules}; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
