"""posenc.compose: one additive encoding that sums several on the same positions."""

import pytest
import torch

import posenc
import posenc.additive.temporal  # registers timestamp, time2vec, calendar
from posenc.composite import Compose, compose
from posenc.models import TransformerLM


def test_compose_sums_members_and_adds_once():
    sin, cal = posenc.create("sinusoidal", dim=8), posenc.create("calendar", dim=8)
    enc = compose(sin, cal)
    assert isinstance(enc, Compose) and enc.kind == "additive" and enc.dim == 8
    positions = torch.tensor([[0, 1_700_000_000, 5], [3, 4, 1_000]])
    expected = sin.encode(positions) + cal.encode(positions)
    # the members on the same positions, summed in order: the same operations
    torch.testing.assert_close(enc.encode(positions), expected, rtol=0, atol=0)
    x = torch.randn(2, 3, 8).bfloat16()
    assert torch.equal(enc(x, positions), (x.float() + expected).bfloat16())  # rounded once
    default = sin.encode(torch.arange(3)) + cal.encode(torch.arange(3))
    torch.testing.assert_close(enc(x.float()), x.float() + default, rtol=0, atol=0)


def test_compose_by_name_and_dict():
    enc = compose("sinusoidal", {"name": "timestamp", "min_period": 1.0}, dim=4)
    assert [e.info.name for e in enc.encodings] == ["sinusoidal", "timestamp"]
    assert enc.encodings[1].config.min_period == 1.0
    assert enc.info.name == "compose(sinusoidal, timestamp)"
    assert enc.info.formula == "x'_p = x_p + PE_sinusoidal[p] + PE_timestamp[p]"
    with pytest.raises(ValueError, match="pass dim="):
        compose("sinusoidal")


def test_mismatched_dims_and_kinds_raise():
    with pytest.raises(ValueError, match=r"one dim.*sinusoidal dim=8.*learned dim=4"):
        compose(posenc.create("sinusoidal", dim=8), posenc.create("learned", dim=4))
    with pytest.raises(ValueError, match="has dim=4 but the model needs dim=8"):
        compose(posenc.create("learned", dim=4), "sinusoidal", dim=8)
    with pytest.raises(ValueError, match=r"additive encodings only.*'rotary'"):
        compose(posenc.create("sinusoidal", dim=8), posenc.create("rope", head_dim=8))
    with pytest.raises(ValueError, match="at least one"):
        compose()


def test_member_checks_apply():
    enc = compose(posenc.create("learned", dim=4, max_positions=10), "timestamp", dim=4)
    assert enc.position_limit() == 10 and enc.integer_positions
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=10"):
        enc.encode(torch.tensor([3, 10]))
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=10"):
        enc(torch.randn(1, 11, 4))
    with pytest.raises(TypeError, match="integer tensor"):
        enc.encode(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="must be >= 0"):
        enc.encode(torch.tensor([-1]))


def test_parameters_state_dict_and_gradients():
    enc = compose("time2vec", {"name": "calendar", "mode": "learned"}, dim=6)
    assert enc.info.trainable
    names = {n for n, _ in enc.named_parameters()}
    assert {"encodings.0.omega", "encodings.1.month"} <= names and set(enc.state_dict()) == names
    enc(torch.randn(2, 4, 6), torch.tensor([0, 60, 3600, 86400])).sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    fresh = compose("time2vec", {"name": "calendar", "mode": "learned"}, dim=6)
    fresh.load_state_dict(enc.state_dict())
    positions = torch.tensor([5, 900, 7200])
    torch.testing.assert_close(fresh.encode(positions), enc.encode(positions), rtol=0, atol=0)


def test_compile_fullgraph(tol):
    enc = compose("sinusoidal", "calendar", "time2vec", dim=8)
    x, positions = torch.randn(2, 5, 8), torch.arange(100, 105)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(enc, backend="aot_eager", fullgraph=True)
        # aot_eager may decompose ops: time2vec's projection sums 8 terms of up to about the
        # time (ω·τ, |ω| ~ 1, weights below 1), sin/cos round at their angles' size
        rounding = tol(n=8, scale=105)
        torch.testing.assert_close(compiled(x, positions), enc(x, positions), **rounding)
    finally:
        torch._dynamo.reset()


def test_transformer_lm_with_composed_encoding(check_cached_decoding):
    enc = compose("sinusoidal", "timestamp", dim=32)
    model = TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding=enc).eval()
    check_cached_decoding(model, torch.randint(0, 37, (2, 5)), 6)


def test_grid_encodings_must_agree_on_prefix_and_grid():
    sincos = posenc.create("sincos_2d", dim=8, grid=(2, 3), prefix=1)
    learned = posenc.create("learned_2d", dim=8, grid=(2, 3), prefix=1)
    both = posenc.compose(sincos, learned)
    x = torch.zeros(1, 7, 8)
    # x = 0: (0 + s) + (0 + l) and 0 + (s + l) are the same sums
    torch.testing.assert_close(both(x), sincos(x) + learned(x), rtol=0, atol=0)
    for other in (
        posenc.create("learned_2d", dim=8, grid=(2, 3), prefix=0),  # [CLS] read as a patch
        posenc.create("learned_2d", dim=8, grid=(3, 2), prefix=1),
    ):
        with pytest.raises(ValueError, match="compose needs one grid and one prefix"):
            posenc.compose(sincos, other)
    with pytest.raises(ValueError, match="one number of position axes"):
        posenc.compose(sincos, posenc.create("sinusoidal", dim=8))
