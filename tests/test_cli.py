import json

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


def test_demo_prints_the_example_then_runs_the_arena(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["demo", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "[ 0.51,  0.78,  0.88,  1.14]" in text
    assert "extrapolation: perplexity" in text
    assert f"report: {out / 'report.html'}" in text
    assert (out / "report.html").exists()


def test_demo_and_arena_train_any_registered_1d_encoding(capsys, tmp_path):
    """Every registered encoding of 1-D token positions joins the arena without a change."""
    from posenc.arena.runner import NOT_FOR_TEXT

    names = [
        n
        for n in posenc.available()
        if posenc.registry.get(n).position_axes == 1 and n not in NOT_FOR_TEXT
    ]
    args = ["arena", "run", "extrapolation", "--preset", "tiny", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "run"), "--encodings", *names]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert {r["encoding"] for r in results["measurements"]} == set(names)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["nope", "rope_2d"], "'rope_2d' encodes image-grid coordinates"),
        (["nope", "calendar"], "'calendar' encodes unix timestamps"),
        (["nope", "no-such-encoding"], "unknown encoding 'no-such-encoding'"),
    ],
)
def test_demo_refuses_encodings_it_cannot_train(capsys, tmp_path, names, message):
    args = ["demo", "--preset", "tiny", "--out", str(tmp_path / "run"), "--encodings", *names]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert not (tmp_path / "run").exists()
