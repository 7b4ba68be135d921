"""openPangu-VL's interleaved M-RoPE (vLLM's ``openpangu`` rope type,
``MRotaryEmbeddingInterleaved``): ``mrope_balanced``. The reference is its rule written out
as vLLM-Ascend's code states it: with ``s_t − 1`` temporal pairs (one is kept for the
end), place pairs one at a time; the candidates are the axes with pairs left other than
the last one placed (all with pairs left if none); take the candidate with the smallest
placed/total ratio, the lower axis on a tie; finally one temporal pair."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional.mrope import balanced_mrope_axis


def reference(section):
    counts = {0: section[0] - 1, 1: section[1], 2: section[2]}
    rem, placed, seq, last = dict(counts), {0: 0, 1: 0, 2: 0}, [], None
    while sum(rem.values()):
        cands = [k for k in rem if rem[k] > 0 and k != last] or [k for k in rem if rem[k] > 0]
        best = sorted(cands, key=lambda k: (placed[k] / counts[k], k))[0]
        seq.append(best)
        placed[best] += 1
        rem[best] -= 1
        last = best
    return [*seq, 0]


@pytest.mark.parametrize(
    "section", [(3, 2, 2), (4, 1, 1), (24, 20, 20), (16, 24, 24), (1, 3, 4), (2, 5, 1), (10, 3, 3)]
)
def test_equals_the_rule(section):
    axis = balanced_mrope_axis(section)
    assert axis.tolist() == reference(section)
    assert torch.bincount(axis, minlength=3).tolist() == list(section)
    assert axis[-1] == 0


def test_hand_worked_examples():
    assert balanced_mrope_axis((3, 2, 2)).tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert balanced_mrope_axis((4, 1, 1)).tolist() == [0, 1, 2, 0, 0, 0]


def test_the_encoding_turns_each_pair_by_its_axis():
    enc = posenc.create(
        "mrope", head_dim=16, mrope_section=(3, 3, 2), mrope_interleaved=True, mrope_balanced=True
    )
    ids = torch.randint(0, 30, (3, 1, 5))
    cos, _ = enc.rotation(ids)
    axis = balanced_mrope_axis((3, 3, 2))
    expected = torch.cos(ids[axis].permute(1, 2, 0).double() * enc.inv_freq())
    assert torch.allclose(cos.double(), expected, atol=1e-6)
    text = torch.arange(5)
    rope = posenc.create("rope", head_dim=16)
    x = torch.randn(1, 2, 5, 16)
    assert torch.equal(enc(x, x, positions=text)[0], rope(x, x, positions=text)[0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mrope_section": (3, 3, 2)}, "needs mrope_interleaved=True"),
        ({"mrope_section": (0, 4, 4), "mrope_interleaved": True}, "s_t must be >= 1"),
        ({"mrope_section": (2, 2, 2, 2), "mrope_interleaved": True}, "three sections"),
    ],
)
def test_bad_configs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("mrope", head_dim=16, mrope_balanced=True, **kwargs)
