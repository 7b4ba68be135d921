"""posenc.describe: every encoding's configuration keys with their meaning, and an example
that runs; and every encoding's formula (posenc.info)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
from fractions import Fraction

import pytest
import torch

import posenc
from posenc.describe import (
    SIZE_KEY_DEFAULT,
    ConfigKey,
    attribute_docs,
    config_keys,
    example,
)
from posenc.docstrings import plain

by_name = pytest.mark.parametrize("name", posenc.available())


@by_name
def test_every_encoding_has_a_formula_of_one_to_four_lines(name):
    formula = posenc.info(name).formula
    lines = formula.split("\n")
    assert 1 <= len(lines) <= 4
    assert all(line.strip() for line in lines)
    assert "\\" not in formula  # plain Unicode, no LaTeX


def test_formulas_state_the_math_of_their_code():
    """Spot checks of facts a wrong formula would get wrong."""
    assert "base^(−2i/d)" in posenc.info("sinusoidal").formula
    assert "2^(−8h/H)" in posenc.info("alibi").formula
    assert "(i, i + r/2)" in posenc.info("rope").formula  # the "half" layout's pairs
    assert "ζ_i = (2i + 0.4·r)/(1.4·r)" in posenc.info("xpos").formula
    assert "ψ(max(L, i))" in posenc.info("fire").formula  # max, not min
    assert "base^(−4i/d)" in posenc.info("rope_2d").formula


def test_alibi_formula_gives_the_encodings_slopes_and_bias():
    """m_h = 2^(−8h/c) for h ≤ c, then 2^(−4(2(h − c) − 1)/c), h = 1..H: for H = 6 (c = 4)
    the second branch runs; and the bias is −m_h·(i − j)."""
    formula = posenc.info("alibi").formula
    assert "m_h = 2^(−8h/c) for h ≤ c, then 2^(−4(2(h − c) − 1)/c) for h > c" in formula
    assert "s_ij = q_i·k_j/√d − m_h·(i − j)" in formula
    H, c = 6, 4  # c: the largest power of 2 ≤ H
    expected = [
        2.0 ** (-8 * h / c) if h <= c else 2.0 ** (-4 * (2 * (h - c) - 1) / c)
        for h in range(1, H + 1)
    ]
    assert expected == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]  # the formula read right
    enc = posenc.create("alibi", n_heads=H)
    assert enc.slopes(dtype=torch.float64).tolist() == expected  # powers of 2: exact
    pos = torch.arange(5)
    i, j = pos[:, None].double(), pos[None, :].double()
    bias = torch.stack([-m * (i - j) for m in expected])  # [H, 5, 5]
    torch.testing.assert_close(enc.bias(pos, pos).double(), bias, rtol=0, atol=0)


def _t5_bucket(r: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """bucket(r), r = j − i, as posenc.info("t5").formula states it, in exact arithmetic:
    ⌊ln(n/E) / ln(max_distance/E)·(N − E)⌋ is the largest k with
    (n/E)^(N − E) ≥ (max_distance/E)^k."""
    N = num_buckets // 2 if bidirectional else num_buckets
    E = N // 2
    assert 2 * E == N  # the configs below keep E an integer
    upper = N if bidirectional and r > 0 else 0  # keys after i: the upper N buckets
    n = abs(r) if bidirectional else max(-r, 0)  # n = max(i − j, 0) or |i − j|
    if n < E:
        return upper + n
    ratio, step = Fraction(n, E) ** (N - E), Fraction(max_distance, E)
    k = 0
    while step ** (k + 1) <= ratio:
        k += 1
    return upper + min(N - 1, E + k)


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 64), (8, 20)], ids=str)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_t5_formula_gives_the_encodings_buckets(num_buckets, max_distance, bidirectional):
    """Every relative distance j − i in −300..300 (both directions, past max_distance): the
    encoding adds w[bucket(j − i), h], so with w[b, h] = b its bias is the bucket."""
    formula = posenc.info("t5").formula
    assert "w[bucket(j − i), h]" in formula
    assert "min(N − 1, E + ⌊ln(n/E) / ln(max_distance/E)·(N − E)⌋)" in formula
    enc = posenc.create(
        "t5",
        n_heads=2,
        num_buckets=num_buckets,
        max_distance=max_distance,
        bidirectional=bidirectional,
    )
    with torch.no_grad():
        enc.weight.copy_(torch.arange(num_buckets, dtype=torch.float32)[:, None].expand(-1, 2))
    got = enc.bias(torch.tensor([300]), torch.arange(601))  # j − i = −300..300
    r = range(-300, 301)
    expected = [_t5_bucket(d, num_buckets, max_distance, bidirectional) for d in r]
    assert got[0, 0].tolist() == got[1, 0].tolist() == [float(b) for b in expected]
    # every bucket is reached, but bucket N (bidirectional: a key after i at distance 0)
    assert len(set(expected)) == num_buckets - bidirectional


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal_formula_gives_the_encodings_table(layout, tol):
    """PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i), ω_i = base^(−2i/d), computed here
    in float64 (concat: all sines, then all cosines)."""
    formula = posenc.info("sinusoidal").formula
    assert "PE[p, 2i] = sin(p·ω_i),  PE[p, 2i+1] = cos(p·ω_i),  ω_i = base^(−2i/d)" in formula
    d, base, length = 64, 10000.0, 512
    expected = torch.empty(length, d, dtype=torch.float64)
    for p in range(length):
        for i in range(d // 2):
            angle = p * base ** (-2 * i / d)
            sin_col, cos_col = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, d // 2 + i)
            expected[p, sin_col], expected[p, cos_col] = math.sin(angle), math.cos(angle)
    enc = posenc.create("sinusoidal", dim=d, base=base, layout=layout)
    got = enc.encode(torch.arange(length))
    assert got.dtype == torch.float32
    # float32: the angle, reduced mod 2π, rounded once (error ≤ eps·π), then sin/cos
    torch.testing.assert_close(got.double(), expected, **tol(n=2, scale=2 * math.pi))
    # float64 positions: the angle p·ω_i carries a few float64 roundings of size ≤ length
    got64 = enc.encode(torch.arange(length, dtype=torch.float64))
    assert got64.dtype == torch.float64
    torch.testing.assert_close(got64, expected, **tol(torch.float64, n=4, scale=length))


@by_name
def test_config_keys_are_the_config_fields_each_with_a_meaning(name):
    keys = config_keys(name)
    config = posenc.registry.get(name).Config
    assert [k.name for k in keys] == [f.name for f in dataclasses.fields(config)]
    for key in keys:
        assert isinstance(key, ConfigKey)
        assert key.meaning.strip(), f"{name}.{key.name} has no meaning"
        assert key.type.strip() and key.default.strip()
        assert "``" not in key.meaning and ":class:" not in key.meaning  # plain text


@by_name
def test_config_docstrings_describe_only_real_keys(name):
    """A documented attribute that is no field is a typo or a stale entry."""
    config = posenc.registry.get(name).Config
    fields = {f.name for f in dataclasses.fields(config)}
    for cls in config.__mro__:
        assert set(attribute_docs(cls.__dict__.get("__doc__"))) <= fields, cls


def test_config_key_defaults_are_what_the_config_says():
    learned = {k.name: k for k in config_keys("learned")}
    assert learned["max_positions"].default == "2048"
    assert learned["init_std"].default == "1.0"
    assert learned["dim"].default == SIZE_KEY_DEFAULT
    assert learned["max_positions"].type == "int"
    rope = {k.name: k for k in config_keys("rope")}
    assert rope["layout"].default == "'half'"
    assert rope["base"].default == "None"
    mixed = {k.name: k for k in config_keys("rope_mixed")}
    assert mixed["head_dim"].default == SIZE_KEY_DEFAULT
    assert mixed["n_heads"].default == "required"  # required, but not the size key
    assert config_keys("nope") == []


def test_inherited_keys_take_their_meaning_from_the_base_config():
    xpos = {k.name: k.meaning for k in config_keys("xpos")}
    rope = {k.name: k.meaning for k in config_keys("rope")}
    assert xpos["head_dim"] == rope["head_dim"] == "size of each attention head (even)."
    assert xpos["scale_base"].startswith("the decay length")
    scaled = {k.name: k.meaning for k in config_keys("scaled_sinusoidal")}
    assert scaled["layout"] == {k.name: k.meaning for k in config_keys("sinusoidal")}["layout"]


def test_an_attribute_spanning_lines_is_joined():
    doc = """Config.

    Attributes:
        dim: embedding
            size, even.
        layout (str): ``half`` or
            ``interleaved``:
            never guessed.

    A paragraph after the section is not an attribute: it says nothing.
    """
    assert attribute_docs(doc) == {
        "dim": "embedding size, even.",
        "layout": "`half` or `interleaved`: never guessed.",
    }
    # and in a real config: RopeConfig's scaling spans three lines
    scaling = {k.name: k.meaning for k in config_keys("rope")}["scaling"]
    assert scaling.startswith("a Hugging Face `rope_parameters` dict, e.g. `{")
    assert scaling.endswith("a parameter record (`ScalingConfig`).")


def test_attribute_docs_without_a_section_or_with_a_bad_entry():
    assert attribute_docs(None) == {}
    assert attribute_docs("No attributes here.") == {}
    with pytest.raises(ValueError, match="must read 'name: meaning'"):
        attribute_docs("X.\n\n    Attributes:\n        not an entry\n")


def test_plain_turns_rest_markup_into_code_spans():
    assert plain(":func:`posenc.functional.rope_cos_sin`") == "`rope_cos_sin`"
    assert plain(":class:`Learned` and ``x``") == "`Learned` and `x`"


def test_a_key_without_meaning_is_an_error(monkeypatch):
    cls = posenc.registry.get("learned")

    @dataclasses.dataclass(frozen=True)
    class Undocumented(cls.Config):
        """Documents none of its own keys."""

        extra: int = 1

    monkeypatch.setattr(cls, "Config", Undocumented)
    with pytest.raises(ValueError, match="does not describe its key 'extra'"):
        config_keys("learned")


@by_name
def test_example_runs_and_prints_the_shape_it_announces(name):
    source = example(name)
    assert f'enc = posenc.create("{name}"' in source
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"<example {name}>", "exec"), {})
    announced = source.rstrip().splitlines()[-1].split("  # ")[-1]
    assert out.getvalue().strip() == announced
    assert announced.startswith("torch.Size([")


def test_examples_use_each_kind_as_it_is_used():
    assert "y = enc(x)" in example("sinusoidal")
    assert "q, k = enc(q, k)" in example("rope")
    assert "posenc.attention(q, k, v, encoding=enc, causal=True)" in example("alibi")
    assert "posenc.attention(q, k, v, encoding=enc, causal=True)" in example("nope")
    assert "posenc.positions.grid(4, 4)" in example("rope_2d")
    assert "grid=(4, 4)" in example("learned_2d")
    assert "posenc.positions.multimodal(" in example("mrope")
    assert 'posenc.create("shaw", n_heads=4, head_dim=16)' in example("shaw")


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown encoding 'rotary'"):
        config_keys("rotary")
    with pytest.raises(ValueError, match="unknown encoding 'rotary'"):
        example("rotary")
