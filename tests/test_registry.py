"""The public API: available(), info(), create() and their errors."""

import dataclasses

import pytest

import posenc
from posenc.base import AdditiveEncoding
from posenc.config import EncodingConfig
from posenc.registry import register


def test_available_lists_every_registered_name_sorted():
    names = posenc.available()
    assert names == sorted(names)
    assert {"sinusoidal", "learned", "scaled_sinusoidal", "nope"} <= set(names)


def test_info():
    sinusoidal = posenc.info("sinusoidal")
    assert isinstance(sinusoidal, posenc.EncodingInfo)
    assert (sinusoidal.kind, sinusoidal.trainable, sinusoidal.extrapolates) == (
        "additive",
        False,
        True,
    )
    assert "1706.03762" in sinusoidal.reference
    learned = posenc.info("learned")
    assert learned.trainable and not learned.extrapolates
    assert posenc.info("nope").kind == "none"
    assert posenc.create("learned", dim=4).info is learned


def test_create_errors_name_what_was_expected():
    with pytest.raises(ValueError, match=r"unknown encoding 'rotary'; available: \[.*'learned'"):
        posenc.create("rotary")
    with pytest.raises(ValueError, match=r"\(name must be one of them\)"):  # the parameter
        posenc.info("rotary")
    with pytest.raises(TypeError, match="must be a str"):
        posenc.info(3)
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['max_len'\].*accepted keys"):
        posenc.create("learned", dim=4, max_len=10)
    with pytest.raises(ValueError, match="max_positions must be >= 1"):
        posenc.create("learned", dim=4, max_positions=0)
    with pytest.raises(TypeError, match="max_positions must be an int"):
        posenc.create("learned", dim=4, max_positions=True)
    with pytest.raises(ValueError, match="unknown config key"):
        posenc.create("nope", dim=4)


def test_config_is_frozen_and_passed_whole():
    enc = posenc.create("sinusoidal", dim=8, layout="concat")
    with pytest.raises(dataclasses.FrozenInstanceError):
        enc.config.dim = 4
    again = type(enc)(enc.config)
    assert again.config == enc.config
    with pytest.raises(TypeError, match="either a Config or keyword arguments"):
        type(enc)(enc.config, dim=8)


def test_register_refuses_duplicates_and_classes_without_config():
    with pytest.raises(ValueError, match="already registered"):
        register(
            "sinusoidal",
            trainable=False,
            relative=False,
            extrapolates=True,
            reference="",
            summary="",
            formula="x' = x",
        )(type(posenc.create("sinusoidal", dim=2)))

    class NoConfig(AdditiveEncoding):
        pass

    with pytest.raises(TypeError, match="must define its own Config"):
        register(
            "no-config",
            trainable=False,
            relative=False,
            extrapolates=True,
            reference="",
            summary="",
            formula="x' = x",
        )(NoConfig)
    assert "no-config" not in posenc.available()


def test_every_config_is_a_frozen_dataclass_with_the_kind_size_key():
    for name in posenc.available():
        cls = posenc.registry.get(name)
        assert issubclass(cls.Config, EncodingConfig)
        assert cls.Config.__dataclass_params__.frozen
        if cls.size_key is not None:
            assert cls.size_key in cls.Config.accepted_keys()


def test_register_requires_a_formula_of_one_to_four_lines():
    with pytest.raises(ValueError, match="formula must be a non-empty str"):
        register(
            "no-formula",
            trainable=False,
            relative=False,
            extrapolates=True,
            reference="",
            summary="",
            formula="  ",
        )
    with pytest.raises(ValueError, match="one to four lines, got 5"):
        register(
            "long-formula",
            trainable=False,
            relative=False,
            extrapolates=True,
            reference="",
            summary="",
            formula="a\nb\nc\nd\ne",
        )
    assert posenc.info("sinusoidal").formula.startswith("PE[p, 2i] = sin(p·ω_i)")
