"""posenc.build: any encoding from a model's sizes, strict on conflicts."""

import pytest

import posenc

SIZES = {"dim": 64, "head_dim": 16, "n_heads": 4}


@pytest.mark.parametrize("name", posenc.available())
def test_build_takes_the_sizes_each_encoding_uses(name):
    cls = posenc.registry.get(name)
    # learned_2d requires a grid: (row, column) for image grids, (t, h, w) for video
    config = {2: {"grid": (4, 4)}, 3: {"grid": (2, 4, 4)}}.get(cls.position_axes, {})
    enc = posenc.build(name, **SIZES, **config)
    assert type(enc) is cls
    wanted = {cls.size_key} | set(cls.Config.required_keys())  # rope_mixed, shaw: two sizes
    for key in wanted & set(SIZES):
        assert getattr(enc.config, key) == SIZES[key]


def test_build_ignores_sizes_an_encoding_does_not_use():
    assert posenc.build("alibi", **SIZES).config.n_heads == 4
    assert posenc.build("shaw", **SIZES).config.head_dim == 16  # Shaw needs head_dim too
    assert posenc.build("sinusoidal", dim=8).dim == 8
    assert posenc.build("nope", **SIZES).kind == "none"


def test_build_accepts_names_dicts_and_instances():
    by_dict = posenc.build({"name": "learned", "max_positions": 8}, dim=4)
    assert (by_dict.dim, by_dict.config.max_positions) == (4, 8)
    by_keys = posenc.build("learned", dim=4, max_positions=8)
    assert by_keys.config == by_dict.config
    enc = posenc.create("rope", head_dim=16)
    assert posenc.build(enc, **SIZES) is enc


def test_build_raises_on_conflicting_sizes_and_keys():
    with pytest.raises(ValueError, match="was given dim=8 but the model needs dim=4"):
        posenc.build({"name": "learned", "dim": 8}, dim=4)
    with pytest.raises(ValueError, match="has head_dim=32 but the model needs head_dim=16"):
        posenc.build(posenc.create("rope", head_dim=32), **SIZES)
    with pytest.raises(ValueError, match=r"\['max_positions'\] given both"):
        posenc.build({"name": "learned", "max_positions": 8}, dim=4, max_positions=16)
    with pytest.raises(TypeError, match="cannot be applied to a built encoding"):
        posenc.build(posenc.create("rope", head_dim=16), base=500.0)
    with pytest.raises(ValueError, match="needs a 'name' key"):
        posenc.build({"dim": 4})
    with pytest.raises(TypeError, match="must be a name, a dict or an Encoding"):
        posenc.build(3)
    with pytest.raises(ValueError, match="unknown encoding"):
        posenc.build("no-such-encoding", dim=4)


@pytest.mark.parametrize(
    ("sizes", "error", "match"),
    [
        ({"dim": "64"}, TypeError, "dim must be an int, got str"),
        ({"n_heads": True}, TypeError, "n_heads must be an int, got bool"),
        ({"dim": -1}, ValueError, "dim must be >= 1"),
        ({"n_heads": 2**70}, ValueError, "n_heads must be <= 2147483647"),
    ],
)
def test_a_size_the_encoding_does_not_use_is_still_checked(sizes, error, match):
    """RoPE reads head_dim only; a wrong dim or n_heads beside it was ignored whatever it was."""
    with pytest.raises(error, match=match):
        posenc.build("rope", **{**SIZES, **sizes})
