from posenc.cli import main


def test_plot_writes_the_articles_heatmap(tmp_path, capsys):
    out = tmp_path / "h.svg"
    argv = ["plot", "heatmap", "--encoding", "sinusoidal", "--dim", "16", "--positions", "5"]
    assert main([*argv, "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"<?xml")
    assert str(out) in capsys.readouterr().out


def test_plot_rejects_an_option_the_figure_does_not_take(tmp_path, capsys):
    assert main(["plot", "rotation", "--length", "3", "--out", str(tmp_path / "r.png")]) == 2
    assert "error: plot rotation does not take --length" in capsys.readouterr().err


def test_plot_bad_values_are_one_line(tmp_path, capsys):
    assert main(["plot", "heatmap", "--encoding", "rope", "--out", str(tmp_path / "h.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert main(["plot", "heatmap", "--out", str(tmp_path / "h.pdf")]) == 2
    assert ".pdf" in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["plot", "heatmap", "--out", str(tmp_path / "h.png")]) == 2
    assert "pip install 'posenc[plot]'" in capsys.readouterr().err
