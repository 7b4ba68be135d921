"""What calling an encoding does, kind by kind: rotary and additive encodings transform
their inputs; a bias encoding is applied inside attention, and calling it says how."""

from __future__ import annotations

import pytest
import torch

import posenc

BIAS = [n for n in posenc.available() if posenc.registry.get(n).kind == "bias"]
EXTRA = {
    "shaw": {"head_dim": 8},
    "cope": {"head_dim": 8},
    "fox": {"dim": 8},
    "path": {"dim": 8, "head_dim": 8},
}


@pytest.mark.parametrize("name", BIAS)
def test_calling_a_bias_encoding_names_the_calls_that_apply_it(name):
    enc = posenc.create(name, n_heads=2, **EXTRA.get(name, {}))
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match=r"posenc\.attention\(q, k, v, enc\).*enc\.bias\("):
        enc(q, q)


def test_the_shared_bias_methods_check_what_they_do_not_read():
    """ALiBi's bias and T5's score_mod read neither q nor scale; a wrong one is still named."""
    p = torch.arange(4)
    alibi, t5 = posenc.create("alibi", n_heads=2), posenc.create("t5", n_heads=2)
    for call in (alibi.bias, t5.score_mod):
        with pytest.raises(TypeError, match="q must be a floating-point tensor"):
            call(p, p, q=torch.zeros(1, 2, 4, 8, dtype=torch.complex64))
        with pytest.raises(TypeError, match="scale must be a number"):
            call(p, p, scale="0.5")
        with pytest.raises(ValueError, match=r"scale must be in \[1e-15"):
            call(p, p, scale=1e300)
    with pytest.raises(TypeError, match=r"k_positions must be a torch\.Tensor, got None"):
        alibi.bias(p, None)


def test_the_shared_rotary_methods_name_their_inputs():
    rope, fope = posenc.create("rope", head_dim=8), posenc.create("fope", head_dim=8)
    q = torch.randn(1, 2, 4, 8)
    rotation = fope.rotation(torch.arange(4))
    with pytest.raises(TypeError, match=r"k must be a torch\.Tensor, got list"):
        fope.rotate_pair(q, q.tolist(), rotation)
    with pytest.raises(ValueError, match="q is on cpu but k on meta"):
        fope.rotate_pair(q, q.to("meta"), rotation)
    with pytest.raises(TypeError, match="positions must be an integer or floating-point tensor"):
        rope.causal_positions(torch.zeros(4, dtype=torch.complex64))


def test_default_positions_name_a_bad_length_or_offset():
    learned = posenc.create("learned", dim=8, max_positions=8)
    assert learned.default_positions(4, offset=2).tolist() == [2, 3, 4, 5]
    with pytest.raises(TypeError, match="seq_len must be an int, got str"):
        learned.default_positions("4")
    with pytest.raises(ValueError, match="offset must be >= 0"):
        learned.default_positions(4, offset=-1)
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=8"):
        learned.default_positions(4, offset=5)
