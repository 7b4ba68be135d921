"""posenc.positions.grid: grid() against a naive loop, the default positions of a configured
grid, the grid config checks and the mixin every grid encoding shares."""

import dataclasses

import pytest
import torch

import posenc
from posenc.base import AdditiveEncoding, RotaryEncoding
from posenc.positions import GridMixin, check_grid, check_grid_config, grid, grid_default_positions

# grid() -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("h", "w", "prefix"), [(1, 1, 0), (2, 3, 0), (3, 2, 1), (4, 4, 3)])
def test_grid_is_row_major_after_the_prefix(h, w, prefix):
    expected = [[0, 0]] * prefix + [[r, c] for r in range(h) for c in range(w)]
    out = grid(h, w, prefix)
    assert out.dtype == torch.int64 and out.shape == (prefix + h * w, 2)
    assert out.tolist() == expected


def test_grid_follows_the_patch_embedding_flatten():
    """Token i of ``flatten(2)`` of a ``[dim, h, w]`` feature map is patch ``grid(h, w)[i]``."""
    h, w = 3, 5
    rows = torch.arange(h).view(h, 1).expand(h, w)  # [h, w]: each patch's row
    cols = torch.arange(w).view(1, w).expand(h, w)
    features = torch.stack((rows, cols))  # [2, h, w]
    assert torch.equal(features.flatten(1).T, grid(h, w))  # [h * w, 2]


def test_normalized_grid_holds_the_patch_centres_in_float32():
    h, w = 2, 4
    out = grid(h, w, prefix=1, normalize=True)
    assert out.dtype == torch.float32
    expected = [[0.0, 0.0]] + [
        [(r + 0.5) / h * 2 - 1, (c + 0.5) / w * 2 - 1] for r in range(h) for c in range(w)
    ]
    torch.testing.assert_close(out, torch.tensor(expected), atol=0, rtol=0)
    assert grid(2, 2, device="meta").device.type == "meta"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((0, 2), {}, ValueError, "h must be >= 1, got 0"),
        ((2, 2.0), {}, TypeError, "w must be an int"),
        ((2, 2, -1), {}, ValueError, "prefix must be >= 0"),
        ((2, 2), {"normalize": 1}, TypeError, "normalize must be a bool, got 1"),
        ((2, 2), {"device": 1}, TypeError, "device must be a torch.device"),
        ((2**16, 2**16), {}, ValueError, r"prefix \+ h · w = 4294967296 tokens"),
    ],
)
def test_bad_grid_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        grid(*args, **kwargs)


# grid_default_positions -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Config:
    grid: tuple[int, int] | None
    prefix: int = 0
    encoding_name = "grid_thing"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((None, 4), {}, TypeError, "config must be a grid encoding's config"),
        ((_Config(grid=(2, 2)), "4"), {}, TypeError, "seq_len must be an int"),
        ((_Config(grid=(2, 2)), 3), {"offset": -1}, ValueError, "offset must be >= 0"),
        ((_Config(grid=(2, 2)), 4), {"device": "no-such"}, ValueError, "device must name"),
    ],
)
def test_bad_default_position_arguments_are_named(args, kwargs, error, match):
    """Each is named, not compared with the grid's token count ('the sequence has 4')."""
    with pytest.raises(error, match=match):
        grid_default_positions(*args, **kwargs)


def test_default_positions_are_the_tail_of_the_configured_grid():
    config = _Config(grid=(2, 3), prefix=1)
    assert torch.equal(grid_default_positions(config, 7), grid(2, 3, 1))
    assert torch.equal(grid_default_positions(config, 2, offset=5), grid(2, 3, 1)[5:])


@pytest.mark.parametrize(
    ("config", "seq_len", "offset", "match"),
    [
        (_Config(grid=None, prefix=2), 4, 0, "grid_thing has no grid configured.*prefix=2"),
        (_Config(grid=(2, 3)), 5, 0, r"cover 6 tokens, but the sequence has 5: pass"),
        (_Config(grid=(2, 3)), 2, 3, "has 2 after 3 earlier tokens"),
    ],
)
def test_default_positions_of_another_length_raise(config, seq_len, offset, match):
    with pytest.raises(ValueError, match=match):
        grid_default_positions(config, seq_len, offset=offset)


# check_grid, check_grid_config ------------------------------------------------------------


def test_check_grid_returns_a_tuple():
    assert check_grid("g", [3, 4]) == (3, 4)
    assert check_grid("g", (1, 1)) == (1, 1)
    assert check_grid("g", None, optional=True) is None


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (None, TypeError, r"g must be a pair \(h, w\) of ints, got None"),
        (4, TypeError, "g must be a pair"),
        ((1, 2, 3), ValueError, "g must be a pair"),
        ((2, 0), ValueError, "g w must be >= 1"),
        ((True, 2), TypeError, "g h must be an int"),
    ],
)
def test_bad_grids_name_the_key(value, error, match):
    with pytest.raises(error, match=match):
        check_grid("g", value)


def test_check_grid_config_normalises_grid_and_checks_prefix():
    config = _Config(grid=[2, 5], prefix=0)
    check_grid_config(config)
    assert config.grid == (2, 5)
    check_grid_config(_Config(grid=None))
    with pytest.raises(TypeError, match="grid must be a pair"):
        check_grid_config(_Config(grid=None), optional=False)
    with pytest.raises(ValueError, match="prefix must be >= 0"):
        check_grid_config(_Config(grid=(2, 2), prefix=-1))


# GridMixin --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sincos_2d", "learned_2d", "rope_2d", "rope_mixed"])
def test_every_grid_encoding_takes_the_mixin(name):
    cls = posenc.registry.get(name)
    assert issubclass(cls, GridMixin)
    assert cls.position_axes == 2
    assert cls.prefix_rows == (cls.kind == "additive")


class _Base:
    """The encoding interface the mixin builds on: check_positions."""

    def check_positions(
        self, positions, *, seq_len=None, batch=None, name="positions", device=None
    ):
        return posenc.positions.check_positions(positions, seq_len=seq_len, name=name, axes=2)


class _Reads(GridMixin, _Base):
    prefix_rows = True
    config = _Config(grid=(2, 2), prefix=2)


class _Rotates(GridMixin, _Base):
    config = _Config(grid=(2, 2), prefix=2)


def test_mixin_defaults_follow_the_configured_grid():
    for enc in (_Reads(), _Rotates()):
        assert torch.equal(enc.default_positions(6), grid(2, 2, 2))


def test_mixin_prefix_rows_must_be_there_and_start_at_token_zero():
    """Read as prefix tokens, the first rows must exist and a window may not skip them;
    read as coordinates, any window of the grid is fine."""
    with pytest.raises(ValueError, match="pos has 1 rows but this encoding has prefix=2"):
        _Reads().check_positions(grid(1, 1), name="pos")
    assert _Rotates().check_positions(grid(1, 1)).shape == (1, 2)
    with pytest.raises(ValueError, match="start at token 0, not 4"):
        _Reads().default_positions(2, offset=4)
    assert torch.equal(_Rotates().default_positions(2, offset=4), grid(2, 2, 2)[4:])


def test_mixin_comes_before_the_kind_base():
    """Placed first, its attributes and methods win over those of the kind's base."""
    for base in (AdditiveEncoding, RotaryEncoding):
        cls = type("Grid", (GridMixin, base), {})
        assert cls.position_axes == 2 and cls.nonnegative_positions is False
        assert cls.default_positions is GridMixin.default_positions
