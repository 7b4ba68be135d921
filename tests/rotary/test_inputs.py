"""The shared checks of rotate(x, rotation, key) and rotation(positions, seq_len) of the
rotary encodings whose tables are their own (FoPE, PoPE, the grid RoPEs; M-RoPE's
seq_len): each wrong argument is refused by name, and a valid call is what it was."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.positions import grid

B, H, S, D = 2, 2, 4, 8
P = torch.tensor([0, 3, 1, 2])
GRID = grid(2, 2)

#: name, config and valid positions of each encoding that rotates with check_rotate
ROTATES = {
    "fope": ({}, P),
    "pope": ({"n_heads": H}, P),
    "rope_2d": ({}, GRID),
    "rope_mixed": ({"n_heads": H}, GRID),
}


def make(name: str, head_dim: int = D) -> posenc.Encoding:
    config, _ = ROTATES[name]
    torch.manual_seed(0)
    return posenc.create(name, head_dim=head_dim, **config)


def heads(seq: int = S, d: int = D) -> torch.Tensor:
    return torch.randn(B, H, seq, d, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", sorted(ROTATES))
@pytest.mark.parametrize("key", [False, True])
def test_a_valid_call_is_unchanged_by_the_checks(name: str, key: bool):
    """rotate() of a list of the tables is rotate() of their tuple, and forward() is
    rotate() of rotation(): the checks turn nothing away that was valid."""
    enc, positions = make(name), ROTATES[name][1]
    x = heads()
    rotation = enc.rotation(positions)
    torch.testing.assert_close(enc.rotate(x, list(rotation), key=key), enc.rotate(x, rotation, key))
    q2, k2 = enc(x, x, positions=positions)
    torch.testing.assert_close(q2, enc.rotate(x, rotation))
    torch.testing.assert_close(k2, enc.rotate(x, rotation, key=True))


BAD_X = [
    (None, TypeError),
    ("x", TypeError),
    ([[1.0]], TypeError),
    (torch.ones(B, H, S, D, dtype=torch.int64), TypeError),  # would be turned into ints
    (torch.ones(B, H, S, D, dtype=torch.complex64), TypeError),
    (torch.ones(B, H, S, D + 2), ValueError),  # another head_dim
    (torch.ones(H, S, D), ValueError),  # no batch dimension
]


@pytest.mark.parametrize("name", sorted(ROTATES))
@pytest.mark.parametrize(("x", "error"), BAD_X)
def test_a_wrong_x_is_refused_by_name(name: str, x, error: type[Exception]):
    enc, positions = make(name), ROTATES[name][1]
    with pytest.raises(error, match=r"\bx\b"):
        enc.rotate(x, enc.rotation(positions))


@pytest.mark.parametrize("name", sorted(ROTATES))
@pytest.mark.parametrize("key", [None, "no", 1, 0.0])
def test_a_key_that_is_not_a_bool_is_refused(name: str, key):
    """A truthy string or an int never decides which of q and k is turned."""
    enc, positions = make(name), ROTATES[name][1]
    with pytest.raises(TypeError, match="key must be a bool"):
        enc.rotate(heads(), enc.rotation(positions), key=key)


WRONG_ROTATIONS = [
    "none",
    "a tensor",
    "one table short",
    "one table too many",
    "int tables",
    "of other positions",
    "of another head_dim",
    "of another batch",
    "on meta",
]


def wrong_rotation(name: str, label: str) -> tuple[object, type[Exception]]:
    """The wrong ``rotation`` called ``label`` for encoding ``name``, and its error."""
    enc, positions = make(name), ROTATES[name][1]
    rotation = enc.rotation(positions)
    other_length = torch.cat((positions, positions[:1]))  # 5 positions for 4 tokens
    return {
        "none": (None, TypeError),
        "a tensor": (rotation[0], TypeError),
        "one table short": (rotation[:-1], ValueError),
        "one table too many": ((*rotation, rotation[0]), ValueError),
        "int tables": (tuple(t.long() for t in rotation), TypeError),
        "of other positions": (enc.rotation(other_length), ValueError),
        "of another head_dim": (make(name, head_dim=2 * D).rotation(positions), ValueError),
        "of another batch": (tuple(t.expand(3, *t.shape[-3:]) for t in rotation), ValueError),
        "on meta": (tuple(t.to("meta") for t in rotation), ValueError),
    }[label]


@pytest.mark.parametrize("name", sorted(ROTATES))
@pytest.mark.parametrize("label", WRONG_ROTATIONS)
def test_a_wrong_rotation_is_refused_by_name(name: str, label: str):
    """Another encoding's, another length's or another batch's tables are refused before
    they broadcast into a wrong result or a torch error."""
    rotation, error = wrong_rotation(name, label)
    with pytest.raises(error, match="rotation"):
        make(name).rotate(heads(), rotation)


def test_the_tables_of_one_head_count_are_refused_for_another():
    """FoPE's tables per key/value head: a rotation of another n_kv_heads is refused."""
    one, two = posenc.create("fope", head_dim=D), posenc.create("fope", head_dim=D, n_kv_heads=2)
    with pytest.raises(ValueError, match="rotation"):
        one.rotate(heads(), two.rotation(P))


SEQ_LENS = [("3", TypeError), (True, TypeError), (1.5, TypeError), (0, ValueError)]
SEQ_LENS += [(-1, ValueError), (2**70, ValueError), (float("nan"), TypeError)]


@pytest.mark.parametrize("name", [*sorted(ROTATES), "mrope"])
def test_seq_len_is_checked_though_it_changes_nothing(name: str):
    """These tables do not depend on the length; a valid seq_len gives the same tables as
    none, a wrong one is refused by name (never silently ignored)."""
    if name == "mrope":
        enc, positions = posenc.create("mrope", head_dim=D), torch.stack((P, P, P))[:, None]
    else:
        enc, positions = make(name), ROTATES[name][1]
    for got, want in zip(enc.rotation(positions, S), enc.rotation(positions), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for seq_len, error in SEQ_LENS:
        with pytest.raises(error, match="seq_len"):
            enc.rotation(positions, seq_len)


@pytest.mark.parametrize(
    ("positions", "error"),
    [(None, TypeError), ([0, 1], TypeError), (torch.zeros(4, dtype=torch.complex64), TypeError)],
)
def test_mrope_causal_positions_take_position_tensors_only(positions, error):
    mrope = posenc.create("mrope", head_dim=D)
    with pytest.raises(error, match="positions"):
        mrope.causal_positions(positions)
    assert mrope.causal_positions(torch.stack((P, P, P))[:, None]) is None
    assert torch.equal(mrope.causal_positions(P), P)
