import pytest
import torch

import posenc
from posenc import demo
from posenc.cli import main


def _rows(text: str) -> dict[str, list[str]]:
    """The table rows of ``text`` keyed by their first column (two-space separated cells)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if cells:
            rows.setdefault(cells[0], cells)
    return rows


def _results(out: str) -> dict[str, list[str]]:
    """The rows of the demo's results table, keyed by encoding name."""
    table = out[out.index("\nencoding  ") :].strip().split("\n\n")[0]
    return {k: v for k, v in _rows(table).items() if k != "encoding" and not k.startswith("-")}


def test_list_shows_every_encoding(capsys):
    assert main(["list"]) == 0
    rows = _rows(capsys.readouterr().out)
    for name in posenc.available():
        info = posenc.info(name)
        assert rows[name][:2] == [name, info.kind]
        assert rows[name][-1] == info.summary
    assert rows["learned"][2:5] == ["yes", "no", "no"]  # trainable, relative, extrapolates


def test_info_shows_fields_and_config_defaults(capsys):
    assert main(["info", "learned"]) == 0
    rows = _rows(capsys.readouterr().out)
    info = posenc.info("learned")
    assert rows["kind"] == ["kind", "additive"]
    assert rows["reference"] == ["reference", info.reference]
    assert rows["extrapolates"] == ["extrapolates", "no"]
    assert rows["max_positions"] == ["max_positions", "int", "2048"]
    assert rows["init_std"] == ["init_std", "float", "1.0"]
    assert rows["dim"][:2] == ["dim", "int"]
    assert rows["dim"][2].startswith("required")


def test_info_unknown_name_exits_2(capsys):
    assert main(["info", "no-such-encoding"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    with pytest.raises(ValueError) as excinfo:
        posenc.info("no-such-encoding")
    assert str(excinfo.value) in captured.err
    assert "'no-such-encoding'" in captured.err


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage: posenc" in capsys.readouterr().err


def test_worked_example_is_exact(tol):
    # float32 token values plus sin 0 = 0 and cos 0 = 1 (exact), one rounding, against the
    # decimals rounded to float32: two roundings of values up to 1.14
    torch.testing.assert_close(
        demo.worked_example(0), torch.tensor([0.51, 0.78, 0.88, 1.14]), **tol(n=2, scale=1.14)
    )
    at_5 = demo.worked_example(5)
    expected = torch.tensor([0.51, -0.22, 0.88, 0.14]) + posenc.functional.sinusoidal(
        torch.tensor(5), 4
    )
    torch.testing.assert_close(at_5, expected)
    assert (at_5 - demo.worked_example(0)).abs().max() > 0.5


def test_repeat_batch_is_seeded_and_periodic():
    a = demo.repeat_batch(3, 64, torch.Generator().manual_seed(1))
    b = demo.repeat_batch(3, 64, torch.Generator().manual_seed(1))
    assert a.shape == (3, 64)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # token ids from one seed: integers
    torch.testing.assert_close(a[:, demo.PERIOD :], a[:, : -demo.PERIOD], rtol=0, atol=0)


def test_demo_runs_its_default_encodings(capsys):
    assert main(["demo", "--steps", "2", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "[ 0.51,  0.78,  0.88,  1.14]" in out
    rows = _results(out)
    expected = [n for n in demo.DEMO_ENCODINGS if n in posenc.available()]
    assert list(rows) == expected
    assert {posenc.info(n).kind for n in expected} == {"additive", "rotary", "bias", "none"}
    for name in expected:
        assert rows[name][1] == posenc.info(name).kind
        float(rows[name][2])  # a loss at the training length for every encoding
    assert rows["learned"][3] == f"error: length {demo.EVAL_LEN} exceeds max_positions=64"
    for name in set(expected) - {"learned"}:
        float(rows[name][3])  # every other encoding runs at twice the length


def test_demo_trains_any_registered_encoding(capsys):
    names = [
        n
        for n in posenc.available()
        if n not in demo.DEMO_ENCODINGS and posenc.registry.get(n).position_axes == 1
    ]
    assert main(["demo", "--steps", "1", "--encodings", *names]) == 0
    rows = _results(capsys.readouterr().out)
    assert list(rows) == names
    for name in names:
        float(rows[name][3])


def test_demo_encodings_option(capsys):
    assert main(["demo", "--steps", "1", "--encodings", "nope", "learned"]) == 0
    out = capsys.readouterr().out
    assert list(_results(out)) == ["nope", "learned"]


def test_demo_refuses_image_grid_encodings(capsys):
    assert main(["demo", "--steps", "1", "--encodings", "nope", "rope_2d"]) == 2
    captured = capsys.readouterr()
    assert "'rope_2d' encodes image-grid coordinates" in captured.err
    assert captured.out == ""


def test_demo_unknown_encoding_exits_2(capsys):
    assert main(["demo", "--encodings", "nope", "no-such-encoding"]) == 2
    captured = capsys.readouterr()
    assert "unknown encoding 'no-such-encoding'" in captured.err
    assert captured.out == ""
