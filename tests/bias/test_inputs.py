"""The shared checks of bias(q_positions, k_positions, q, scale) of the bias encodings that
override it (CoPE, FIRE, FoX, Shaw): missing positions and a wrong q or scale are refused
by name, also where the encoding does not read q or scale."""

from __future__ import annotations

import math

import pytest
import torch

import posenc

B, H, S, D = 2, 2, 4, 8
P = torch.tensor([0, 1, 2, 3])


def gen(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def bias_call(name: str):
    """``(bias, kwargs)``: a bias encoding's bias() and the keywords of a valid call."""
    torch.manual_seed(0)
    if name == "cope":
        enc = posenc.create("cope", n_heads=H, head_dim=D)
        return enc.bias, {"q": gen(B, H, S, D, seed=1), "k": gen(B, H, S, D, seed=2)}
    if name == "fox":
        return posenc.create("fox", n_heads=H, dim=D).bias, {"x": gen(B, S, D)}
    if name == "shaw":
        return posenc.create("shaw", n_heads=H, head_dim=D).bias, {"q": gen(B, H, S, D)}
    return posenc.create(name, n_heads=H).bias, {}


NAMES = ["cope", "fire", "fox", "shaw"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("missing", ["q_positions", "k_positions"])
def test_missing_positions_are_refused_by_name(name: str, missing: str):
    """bias() materialises the table for the positions' lengths: None is no default."""
    bias, kwargs = bias_call(name)
    positions = {"q_positions": P, "k_positions": P, missing: None}
    with pytest.raises(TypeError, match=f"{missing} must be a tensor of positions"):
        bias(**positions, **kwargs)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("scale", "error"),
    [
        ("3", TypeError),
        (True, TypeError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (0.0, ValueError),
        (-1.0, ValueError),
        (1e300, ValueError),
    ],
)
def test_a_wrong_scale_is_refused_also_where_unread(name: str, scale, error: type[Exception]):
    """FIRE's and FoX's bias do not read the score scale; a wrong one is still an error,
    never silently ignored."""
    bias, kwargs = bias_call(name)
    with pytest.raises(error, match="scale"):
        bias(P, P, scale=scale, **kwargs)


@pytest.mark.parametrize("name", ["fire", "fox"])
def test_an_unread_q_must_still_be_a_float_tensor(name: str):
    bias, kwargs = bias_call(name)
    with pytest.raises(TypeError, match=r"\bq\b"):
        bias(P, P, q=[[1.0]], **kwargs)
    # a valid q and scale change nothing: these biases depend on positions (and x) alone
    q = gen(B, H, S, D)
    torch.testing.assert_close(bias(P, P, q=q, scale=0.5, **kwargs), bias(P, P, **kwargs))
