"""posenc.config: the Config base (keys, from_kwargs, replace) and the shared validators."""

from __future__ import annotations

import dataclasses
import math

import pytest

from posenc.config import (
    MAX_FLOAT,
    MAX_INT,
    EncodingConfig,
    check_choice,
    check_float,
    check_int,
)


@dataclasses.dataclass(frozen=True)
class Example(EncodingConfig):
    encoding_name = "example"
    dim: int
    base: float = 10000.0
    layout: str = "half"

    def __post_init__(self) -> None:
        check_int("dim", self.dim, even=True)
        check_float("base", self.base)
        check_choice("layout", self.layout, ("half", "interleaved"))


def test_keys_in_declaration_order_and_required_ones():
    assert Example.accepted_keys() == ["dim", "base", "layout"]
    assert Example.required_keys() == ["dim"]


def test_from_kwargs_builds_and_validates():
    config = Example.from_kwargs(dim=8, layout="interleaved")
    assert config == Example(dim=8, base=10000.0, layout="interleaved")
    assert config.to_dict() == {"dim": 8, "base": 10000.0, "layout": "interleaved"}
    assert config.replace(dim=16).dim == 16
    with pytest.raises(ValueError, match="dim must be even"):
        config.replace(dim=7)  # replace validates too
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.dim = 4  # type: ignore[misc]


def test_unknown_and_missing_keys_are_named_with_the_accepted_ones():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['bsae'\] for 'example'"):
        Example.from_kwargs(dim=8, bsae=2.0)
    with pytest.raises(ValueError, match=r"missing required config key\(s\) \['dim'\]"):
        Example.from_kwargs(base=2.0)
    with pytest.raises(ValueError, match=r"accepted keys: \['dim', 'base', 'layout'\]"):
        Example.from_kwargs()


@pytest.mark.parametrize(
    ("value", "kwargs", "error", "match"),
    [
        (True, {}, TypeError, "n must be an int, got bool"),
        (2.0, {}, TypeError, "n must be an int, got float"),
        (0, {}, ValueError, "n must be >= 1, got 0"),
        (-1, {"minimum": 0}, ValueError, "n must be >= 0"),
        (MAX_INT + 1, {}, ValueError, f"n must be <= {MAX_INT}"),
        (3, {"even": True}, ValueError, "n must be even"),
        (11, {"maximum": 10}, ValueError, "n must be <= 10"),
    ],
)
def test_check_int_refuses(value, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_int("n", value, **kwargs)


@pytest.mark.parametrize("value", [1, 0, MAX_INT])
def test_check_int_accepts(value):
    check_int("n", value, minimum=0)


@pytest.mark.parametrize(
    ("value", "kwargs", "error", "match"),
    [
        ("1", {}, TypeError, "x must be a number, got str"),
        (False, {}, TypeError, "x must be a number, got bool"),
        (math.nan, {}, ValueError, "x must be finite"),
        (math.inf, {"positive": False}, ValueError, "x must be finite"),
        (0.0, {}, ValueError, "x must be > 0"),
        (-2.0, {}, ValueError, "x must be > 0"),
        (MAX_FLOAT * 10, {}, ValueError, r"x must be in \[1e-15, 1e\+15\]"),
        (1e-20, {}, ValueError, r"x must be in \[1e-15, 1e\+15\]"),
        (-1e39, {"positive": False}, ValueError, "x must be 0 or of magnitude in"),
    ],
)
def test_check_float_refuses(value, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_float("x", value, **kwargs)


@pytest.mark.parametrize(
    ("value", "positive"),
    [(1.0, True), (3, True), (MAX_FLOAT, True), (1 / MAX_FLOAT, True), (0.0, False), (-5.0, False)],
)
def test_check_float_accepts(value, positive):
    check_float("x", value, positive=positive)


def test_check_choice():
    check_choice("layout", "half", ("half", "interleaved"))
    with pytest.raises(ValueError, match=r"layout must be one of \['half', 'interleaved'\]"):
        check_choice("layout", "neox", ("half", "interleaved"))
    with pytest.raises(ValueError, match="got None"):
        check_choice("layout", None, ("half",))
