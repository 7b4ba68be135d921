"""What calling an encoding does, kind by kind: rotary and additive encodings transform
their inputs; a bias encoding is applied inside attention, and calling it says how."""

from __future__ import annotations

import pytest
import torch

import posenc

BIAS = [n for n in posenc.available() if posenc.registry.get(n).kind == "bias"]
EXTRA = {"shaw": {"head_dim": 8}, "cope": {"head_dim": 8}, "fox": {"dim": 8}}


@pytest.mark.parametrize("name", BIAS)
def test_calling_a_bias_encoding_names_the_calls_that_apply_it(name):
    enc = posenc.create(name, n_heads=2, **EXTRA.get(name, {}))
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match=r"posenc\.attention\(q, k, v, enc\).*enc\.bias\("):
        enc(q, q)
