import math

import numpy as np
import pytest
import torch

import posenc
from posenc.plot import save
from posenc.plot.bias import (
    INIT_STD,
    SHAW_HEAD_DIM,
    _state,
    bias,
    causal_only,
    drawn_config,
    zero_start,
)

#: what each drawn encoding's panels must be: its form is causal (keys j > i masked)
CAUSAL = {"alibi": True, "t5": True, "kerple": False, "fire": False}


def panels(fig):
    return [ax for ax in fig.get_axes() if ax.get_images()]


def image(ax):
    """The panel's image data as a masked array (NaN cells masked by matplotlib)."""
    return np.ma.masked_invalid(ax.get_images()[0].get_array())


def expected_bias(name, n_heads, length, **config):
    torch.manual_seed(0)
    enc = posenc.create(name, n_heads=n_heads, **config)
    with torch.no_grad():
        return enc.bias(torch.arange(length), torch.arange(length)).numpy()


def future(length):
    return np.triu(np.ones((length, length), dtype=bool), 1)


@pytest.mark.parametrize("name", list(CAUSAL))
def test_each_panel_is_a_heads_bias_masked_where_causal(name):
    fig = bias(encoding=name, n_heads=4, length=6)
    expected = expected_bias(name, 4, 6, **zero_start(name))
    axes = panels(fig)
    assert len(axes) == 4
    for h, ax in enumerate(axes):
        assert ax.get_title().split(",")[0] == f"head {h}"
        assert ax.get_xlabel() and ax.get_ylabel()
        data = image(ax)
        hidden = future(6) if CAUSAL[name] else np.zeros((6, 6), dtype=bool)
        np.testing.assert_array_equal(np.ma.getmaskarray(data), hidden)
        np.testing.assert_allclose(data.data[~hidden], expected[h][~hidden])
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == CAUSAL[name]  # the masked cells are drawn hatched
    assert name in fig.get_suptitle()
    assert ("initialisation" in fig.get_suptitle() or "init" in fig.get_suptitle()) == (
        posenc.info(name).trainable
    )
    assert ("(j > i) masked" in fig.get_suptitle()) == CAUSAL[name]


def test_alibi_never_shows_a_positive_future_bias():
    """The issue's example: head 0 (slope 1/2) gave +15.5 at i = 0, j = 31."""
    (ax,) = panels(bias(encoding="alibi", n_heads=8, length=32, heads=[0]))
    data = image(ax)
    assert data.mask[0, 31] and data.mask[0, 1]
    assert float(data.max()) == 0.0 and float(data.min()) == -15.5
    assert ax.get_title() == "head 0, m = 0.5"


@pytest.mark.parametrize("name", ["alibi", "kerple", "fire", "t5"])
def test_each_head_has_its_own_colour_scale(name):
    fig = bias(encoding=name, n_heads=8, length=12)
    limits = []
    for ax in panels(fig):
        data = image(ax)
        limits.append(ax.get_images()[0].get_clim())
        assert limits[-1] == pytest.approx((float(data.min()), float(data.max())))
    assert len(set(limits)) == 8  # every head's limits differ
    assert len(fig.get_axes()) == 16  # a colour bar per panel
    assert "own colour scale" in fig.get_suptitle()


@pytest.mark.parametrize("name", ["t5", "cope"])
def test_tables_that_start_at_zero_are_drawn_random(name):
    fig = bias(encoding=name, n_heads=2, length=12)
    for ax in panels(fig):
        data = image(ax).compressed()
        assert data.std() > 0.1  # not the flat image of a zero table
    assert f"random init: init_std={INIT_STD:g}, seed 0" in fig.get_suptitle()
    assert "zero until trained" in fig.get_suptitle()


def test_t5_shows_its_buckets():
    """Each diagonal (distance d = i - j) is its bucket's value: distances 0..15 a bucket
    each, then log-spaced buckets that several distances share (32 buckets, max distance
    128, causal)."""
    (ax,) = panels(bias(encoding="t5", n_heads=1, length=32))
    data = image(ax).data
    torch.manual_seed(0)
    enc = posenc.create("t5", n_heads=1, init_std=INIT_STD)
    weight, md = enc.weight[:, 0].detach().numpy(), enc.config.max_distance
    bucket = {d: int(enc.buckets[md - d]) for d in range(32)}
    for d in range(32):
        np.testing.assert_array_equal(np.diagonal(data, -d), weight[bucket[d]])
    assert len({bucket[d] for d in range(16)}) == 16 and bucket[16] == bucket[17] == bucket[18]
    assert len(np.unique(data[~future(32)])) == len(set(bucket.values()))


def test_shaw_is_drawn_for_fixed_random_queries():
    fig = bias(encoding="shaw", n_heads=2, length=5)
    torch.manual_seed(0)
    enc = posenc.create("shaw", n_heads=2, head_dim=SHAW_HEAD_DIM)
    q = torch.randn(1, 2, 5, SHAW_HEAD_DIM, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = enc.bias(torch.arange(5), torch.arange(5), q=q)[0].numpy()
    for h, ax in enumerate(panels(fig)):
        assert not image(ax).mask.any()  # both directions: nothing masked
        np.testing.assert_allclose(image(ax).data, expected[h])


@pytest.mark.parametrize("name", ["cope", "fox"])
def test_earlier_keys_only_encodings_are_masked(name):
    for ax in panels(bias(encoding=name, n_heads=2, length=7)):
        np.testing.assert_array_equal(np.ma.getmaskarray(image(ax)), future(7))
    with pytest.raises(ValueError, match="causal=False"):
        bias(encoding=name, causal=False)


def test_causal_true_masks_a_bidirectional_encoding():
    fig = bias(encoding="kerple", n_heads=2, length=6, causal=True)
    expected = expected_bias("kerple", 2, 6)
    for h, ax in enumerate(panels(fig)):
        np.testing.assert_array_equal(np.ma.getmaskarray(image(ax)), future(6))
        np.testing.assert_allclose(image(ax).data[~future(6)], expected[h][~future(6)])


@pytest.mark.parametrize(("name", "key"), [("alibi", "symmetric"), ("t5", "bidirectional")])
def test_causal_false_draws_the_bidirectional_form(name, key):
    fig = bias(encoding=name, n_heads=2, length=6, causal=False)
    expected = expected_bias(name, 2, 6, **{key: True, **zero_start(name)})
    for h, ax in enumerate(panels(fig)):
        assert not np.ma.getmaskarray(image(ax)).any()
        np.testing.assert_allclose(image(ax).data, expected[h])
    assert f"{key}=True" in fig.get_suptitle()
    if name == "alibi":  # -m|i - j|: the future is penalised like the past
        assert (image(panels(fig)[0]).data <= 0).all()


def test_causal_follows_the_declaration_not_the_name():
    assert causal_only(posenc.create("alibi", n_heads=2))
    assert not causal_only(posenc.create("alibi", n_heads=2, symmetric=True))
    assert causal_only(posenc.create("t5", n_heads=2))
    assert not causal_only(posenc.create("t5", n_heads=2, bidirectional=True))
    assert not causal_only(posenc.create("kerple", n_heads=2))
    assert causal_only(posenc.create("fox", n_heads=2, dim=4))


def test_drawn_config_by_declared_keys():
    assert zero_start("t5") == zero_start("cope") == {"init_std": INIT_STD}
    assert zero_start("shaw") == zero_start("alibi") == {}  # Shaw starts at 0.02: drawn so
    assert drawn_config("shaw") == {"head_dim": SHAW_HEAD_DIM}
    assert drawn_config("alibi", causal=False) == {"symmetric": True}
    assert drawn_config("kerple", causal=False) == {}


def test_a_learned_bias_flat_at_initialisation_says_so():
    assert "constant until trained" in _state(True, {}, torch.zeros(2, 3, 3))
    assert "constant" not in _state(True, {}, torch.arange(18.0).view(2, 3, 3))
    assert _state(False, {}, torch.zeros(2, 3, 3)) == ""


def test_flat_head_gets_a_visible_scale():
    """ALiBi's heads without a bias (alibi_heads < n_heads) are 0: a centred scale."""
    fig = bias(encoding="alibi", n_heads=2, length=1)
    assert [ax.get_images()[0].get_clim() for ax in panels(fig)] == [(-1.0, 1.0)] * 2


def test_chosen_heads():
    fig = bias(encoding="alibi", n_heads=8, length=8, heads=[0, 7])
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["head 0, m = 0.5", "head 7, m = 0.00391"]
    assert len(fig.get_axes()) == 4  # two panels and their colour bars


def test_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    bias(encoding="fire", n_heads=2, length=4)
    assert torch.equal(torch.random.get_rng_state(), state)


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
        ({"causal": "yes"}, "causal"),
        ({"causal": 1}, "causal"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bias(**kwargs)


def test_nan_is_the_mask():
    """The masked cells are NaN in the data itself, not only hidden by a colour."""
    (ax,) = panels(bias(encoding="alibi", n_heads=1, length=4))
    raw = np.asarray(ax.get_images()[0].get_array().data)
    assert all(math.isnan(v) for v in raw[future(4)])
