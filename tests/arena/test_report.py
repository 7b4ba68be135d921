"""posenc.arena.reporting.report and the experiments' figures: the data drawn, the HTML,
and the page as headless Chromium renders it."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from posenc.arena.experiments import EXPERIMENTS
from posenc.arena.reporting import figures, report
from posenc.arena.reporting.records import aggregate
from posenc.arena.reporting.summary import summary

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def html(fake_results_shared):
    """The report of the fake results, built once for the module."""
    return report.build_report(fake_results_shared)


def _rows(results, experiment, **where):
    return [
        r
        for r in aggregate(results["measurements"])
        if r["experiment"] == experiment and all(r.get(k) == v for k, v in where.items())
    ]


def test_summary_and_report_of_one_experiment(fake_results):
    fake_results["measurements"] = [
        m for m in fake_results["measurements"] if m["experiment"] == "nope-needs-causality"
    ]
    assert all(s.startswith("NoPE") for s in summary(fake_results))
    page = report.build_report(fake_results)
    assert page.count("<img ") == 1
    assert 'id="extrapolation"' not in page


def test_timings_group_unit_names_over_seeds(fake_results):
    """Timing keys are training units' names (``what--encoding[--extra]--seed<k>``): one row
    per model and encoding, the speed a mean over seeds."""
    fake_results["timings"]["lm--rope--seed1"]["tokens_per_s"] = 1600.0
    table = report._timings(fake_results)
    rows = [
        re.findall(r"<td[^>]*>([^<]*)</td>", row)
        for row in re.findall(r"<tr>(.*?)</tr>", table)
        if "<td" in row
    ]
    assert re.findall(r"<th>([^<]*)</th>", table) == [
        "model", "encoding", "tokens/s", "seconds (all seeds)", "seeds",
    ]  # fmt: skip
    assert ["lm", "rope", "1,500", "25.0", "2"] in rows  # (1400 + 1600) / 2
    assert ["extend", "yarn x2", "1,400", "25.0", "2"] in rows
    assert ["copy", "alibi", "1,500", "25.0", "2"] in rows
    assert ["mlm", "nope", "1,400", "25.0", "2"] in rows
    assert ["kv", "rope", "1,400", "25.0", "2"] in rows
    models = list(dict.fromkeys(row[0] for row in rows))
    assert models == ["lm", "plan", "extend", "copy", "reverse", "mlm", "kv"]
    assert len(rows) == 4 + 5 + 10 + 6 + 3 + 1


def test_report_of_nothing(fake_results):
    fake_results["measurements"] = []
    fake_results["timings"] = {}
    page = report.build_report(fake_results)
    assert "<img" not in page and "No measurements to summarise" in page


# --- figures -------------------------------------------------------------------------------


def test_extrapolation_figure(fake_results):
    fig = figures.figure("extrapolation", fake_results["measurements"])
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["mode: chunks", "mode: sliding"]
    for ax, mode in zip(axes, ("chunks", "sliding"), strict=True):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        lines = {line.get_label(): line for line in ax.get_lines()}
        for encoding in ("sinusoidal", "rope", "alibi"):
            rows = sorted(
                _rows(fake_results, "extrapolation", encoding=encoding, mode=mode),
                key=lambda r: r["eval_length"],
            )
            line = lines[encoding]
            assert list(line.get_xdata()) == [r["eval_length"] for r in rows]
            assert list(line.get_ydata()) == pytest.approx([r["mean"] for r in rows])
        assert list(lines["learned (cannot run past 64)"].get_ydata()) == pytest.approx([
            5.0 if mode == "sliding" else 6.0
        ])  # fmt: skip
        assert list(lines["L = 64"].get_xdata()) == [64, 64]
        assert len(ax.collections) == 4  # the spread over the two seeds
    # one legend, beside the last panel, names every line
    assert axes[0].get_legend() is None
    legend = [t.get_text() for t in axes[-1].get_legend().get_texts()]
    assert legend[-1] == "L = 64" and "learned (cannot run past 64)" in legend


def test_context_extension_figure(fake_results):
    fig = figures.figure("context-extension", fake_results["measurements"])
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["zero-shot", "fine-tuned"]
    for ax, stage in zip(axes, ("zero-shot", "fine-tuned"), strict=True):
        assert ax.get_yscale() == "log"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["none", "linear", "ntk", "dynamic", "yarn"]
        rows = _rows(fake_results, "context-extension", stage=stage, scaling="yarn")
        assert list(lines["yarn"].get_xdata()) == [2, 4]
        assert list(lines["yarn"].get_ydata()) == pytest.approx([r["mean"] for r in rows])


def test_length_generalization_figure(fake_results):
    fig = figures.figure("length-generalization", fake_results["measurements"])
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["task: copy", "task: reverse"]
    rows = _rows(fake_results, "length-generalization", task="reverse", encoding="rope")
    line = next(x for x in axes[1].get_lines() if x.get_label() == "rope")
    assert list(line.get_ydata()) == pytest.approx([r["mean"] for r in rows])
    span = axes[0].patches[0]  # the shaded training range
    assert span.get_label() == "trained (≤ 16)"


def test_nope_figure(fake_results):
    fig = figures.figure("nope-needs-causality", fake_results["measurements"])
    (ax,) = fig.get_axes()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["nope", "rope", "alibi"]
    causal, bidirectional = ax.containers
    assert [b.get_height() for b in bidirectional] == pytest.approx(
        [r["mean"] for r in _rows(fake_results, "nope-needs-causality", mode="bidirectional")]
    )
    assert [b.get_height() for b in causal] == pytest.approx([5.0, 5.0, 5.0])


def test_lost_in_the_middle_figure(fake_results):
    fig = figures.figure("lost-in-the-middle", fake_results["measurements"])
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["query-last", "query-first"]
    lines = {line.get_label(): line for line in axes[0].get_lines()}
    hf = lines["hf:sshleifer/tiny-gpt2, 8 pairs"]
    assert hf.get_linestyle() == "--" and lines["rope, 4 pairs"].get_linestyle() == "-"
    rows = _rows(
        fake_results, "lost-in-the-middle", encoding="hf:sshleifer/tiny-gpt2", mode="query-last",
        n_pairs=8,
    )  # fmt: skip
    assert list(hf.get_xdata()) == list(range(8))
    assert list(hf.get_ydata()) == pytest.approx([r["mean"] for r in rows])


def test_figures_module_has_no_assert():
    """The module's own check raises an error (an ``assert`` vanishes under ``python -O``)."""
    import ast

    tree = ast.parse(Path(figures.__file__).read_text(encoding="utf-8"))
    assert not any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def test_figure_unknown():
    with pytest.raises(ValueError, match="unknown experiment"):
        figures.figure("nope", [])


# --- the page ------------------------------------------------------------------------------


def test_report_self_contained(html, fake_results):
    assert html.count("<img ") == len(EXPERIMENTS)
    assert len(
        re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="[^"]+">', html)
    ) == len(EXPERIMENTS)
    assert "http:" not in html and "https:" not in html  # no URL at all
    assert re.findall(r'src="([a-z]+):', html) == ["data"] * len(EXPERIMENTS)
    assert "<script" not in html and "url(" not in html and "<link" not in html
    assert "prefers-color-scheme: dark" in html
    for sentence in summary(fake_results):
        assert escape(sentence) in html
    assert "posenc arena run --preset tiny --seeds 2" in html  # the command
    assert "tokens/s" in html and "1,400" in html  # timings: rope's 1000 + 100·4
    assert "<caption>extrapolation: perplexity (mode sliding)</caption>" in html
    assert html.count("cannot run") >= 6


def test_write_report(tmp_path, fake_results):
    fake_results["measurements"] = [
        m for m in fake_results["measurements"] if m["experiment"] == "nope-needs-causality"
    ]
    path = report.write_report(tmp_path, fake_results)
    assert path == tmp_path / "report.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_report_renders_in_chromium(tmp_path, html):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    errors: list[str] = []
    requests: list[str] = []
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=args
        )
        try:
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            images = page.evaluate(
                "Array.from(document.images, i => [i.complete, i.naturalWidth, i.alt])"
            )
        finally:
            context.close()
    assert len(images) == len(EXPERIMENTS)
    assert all(complete and width > 0 and alt for complete, width, alt in images), images
    assert errors == []
    assert all(url.startswith(("file:", "data:")) for url in requests), requests


def test_a_pipeline_check_is_said_under_the_title(fake_results):
    from posenc.arena.reporting.report import build_report

    assert "A pipeline check" not in build_report(fake_results)
    for m in fake_results["measurements"]:
        if m["experiment"] == "extrapolation":
            m["value"] = 350.0
    page = build_report(fake_results)
    assert page.index("A pipeline check, not evidence") < page.index('id="summary"')


def test_the_report_leads_with_headlines_and_folds_the_detail(fake_results):
    """A few plain sentences first (what held, what did not, the seeds), then every
    experiment's numbers folded below them."""
    from posenc.arena.reporting.headlines import headlines
    from posenc.arena.reporting.report import build_report

    leads = headlines(fake_results)
    assert 3 <= len(leads) <= 5
    assert any(line.startswith("Read at ") and "training length" in line for line in leads)
    assert any("seed" in line.lower() for line in leads)
    page = build_report(fake_results)
    summary = page.index('id="summary"')
    fold = page.index("<details><summary>Every experiment's numbers</summary>")
    assert summary < page.index(leads[0].replace("'", "&#x27;")[:30]) < fold


def test_a_pipeline_check_has_one_headline(fake_results):
    from posenc.arena.reporting.headlines import headlines

    for m in fake_results["measurements"]:
        if m["experiment"] == "extrapolation":
            m["value"] = 350.0
    (line,) = headlines(fake_results)
    assert line.startswith("A pipeline check, not evidence")
