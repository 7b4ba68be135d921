"""posenc guide: the situations as data, the needs that select them, the arena numbers
attached to them (checked against numbers computed here from the records) and the command."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

import posenc
from posenc.cli.app import new_app, run
from posenc.cli.guide import register
from posenc.guide import (
    FLAGS,
    NEEDS,
    NO_RUN_HINT,
    SITUATIONS,
    find_run,
    guide,
    published_run,
    render,
    when_to_use,
)


def _fake_results() -> dict[str, Any]:
    """The arena tests' realistic fake results (tests/arena/conftest.py), loaded by path."""
    path = Path(__file__).parents[1] / "arena" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_arena_fake_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._fake_results()


@pytest.fixture
def results() -> dict[str, Any]:
    return _fake_results()


@pytest.fixture
def run_dir(tmp_path: Path, results: dict[str, Any]) -> Path:
    d = tmp_path / "runs" / "arena-tiny-20250101-000000"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(results))
    return d


def _mean(results: dict[str, Any], **where: Any) -> float:
    """The mean over seeds of the records matching ``where``, computed here."""
    values = [
        m["value"] for m in results["measurements"] if all(m.get(k) == v for k, v in where.items())
    ]
    assert values and None not in values, where
    return statistics.fmean(values)


def _advice(needs: list[str], run: Path | None = None) -> dict[str, Any]:
    return {a.situation.key: a for a in guide(needs, run)}


# --- the situations --------------------------------------------------------------------


def test_every_recommended_encoding_is_registered() -> None:
    names = set(posenc.available())
    for s in SITUATIONS:
        assert s.recommend, s.key
        assert set(s.recommend) <= names, (s.key, set(s.recommend) - names)


def test_every_situation_of_the_issue_is_there() -> None:
    # the issue's list, in its order, and the key each has here
    issue = {
        "a simple parameter-free baseline": "simple-baseline",
        "a fixed length and the best fit on one dataset": "fixed-length",
        "longer sequences than trained": "longer-than-trained",
        "grammar that depends on distance": "distance-grammar",
        "a modern general LLM": "general-llm",
        "extrapolation first with the simplest implementation": "extrapolation-simple",
        "relative benefits without the memory cost": "relative-low-memory",
        "images": "images",
        "video with text": "video-text",
        "time series": "time-series",
    }
    assert [s.key for s in SITUATIONS] == list(issue.values())
    assert len({s.question for s in SITUATIONS}) == len(SITUATIONS)


def test_the_answers_follow_the_article_and_the_arena() -> None:
    by_key = {s.key: s for s in SITUATIONS}
    assert by_key["simple-baseline"].recommend[0] == "sinusoidal"
    assert by_key["fixed-length"].recommend == ("learned",)
    assert by_key["general-llm"].recommend == ("rope",)
    assert by_key["extrapolation-simple"].recommend == ("alibi",)
    assert by_key["video-text"].recommend == ("mrope",)
    assert set(by_key["images"].recommend) == {"rope_2d", "rope_mixed", "sincos_2d", "learned_2d"}
    assert set(by_key["time-series"].recommend) == {"timestamp", "time2vec", "calendar"}
    # past L both views are given: bias encodings zero-shot, RoPE with a scaling
    longer = by_key["longer-than-trained"]
    assert longer.recommend[:3] == ("alibi", "kerple", "fire") and "rope" in longer.recommend
    assert "scaling" in longer.why and "article" in longer.why
    # the numbers come from a run's evidence, never from text that a run could contradict
    assert not re.search(r"×\d", longer.why)


def test_every_need_has_a_flag_and_a_situation() -> None:
    assert FLAGS["extrapolation"] == "--need-extrapolation"
    assert all(FLAGS[n] == f"--{n}" for n in NEEDS if n != "extrapolation")
    assert {n for s in SITUATIONS for n in s.needs} == set(NEEDS)


# --- narrowing ---------------------------------------------------------------------------


def test_no_needs_gives_the_whole_guide() -> None:
    assert [a.situation for a in guide()] == list(SITUATIONS)
    assert all(a.evidence == () for a in guide())


@pytest.mark.parametrize(
    ("needs", "keys"),
    [
        (["simple"], ["simple-baseline", "extrapolation-simple"]),
        (["fixed-length"], ["fixed-length"]),
        (["extrapolation"], ["longer-than-trained", "extrapolation-simple"]),
        (["distance-grammar"], ["distance-grammar"]),
        (["general-llm"], ["general-llm"]),
        (["low-memory"], ["relative-low-memory"]),
        (["vision"], ["images"]),
        (["video"], ["video-text"]),
        (["time-series"], ["time-series"]),
        # two needs: the situation that has both, else one for each
        (["extrapolation", "simple"], ["extrapolation-simple"]),
        (["simple", "extrapolation", "simple"], ["extrapolation-simple"]),
        (["vision", "time-series"], ["images", "time-series"]),
    ],
)
def test_needs_narrow_the_guide(needs: list[str], keys: list[str]) -> None:
    assert [a.situation.key for a in guide(needs)] == keys


def test_bad_needs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"needs: unknown \['speed'\].*'time-series'"):
        guide(["vision", "speed"])
    with pytest.raises(TypeError, match="needs: expected a sequence"):
        guide("vision")


# --- when_to_use ---------------------------------------------------------------------------


def test_when_to_use() -> None:
    longer = next(s for s in SITUATIONS if s.key == "longer-than-trained").question
    simplest = next(s for s in SITUATIONS if s.key == "extrapolation-simple").question
    assert when_to_use("alibi") == [longer, simplest]
    assert len(when_to_use("rope")) == 4
    assert when_to_use("scaled_sinusoidal") == []  # registered, but no situation names it
    for name in posenc.available():
        assert when_to_use(name) == [s.question for s in SITUATIONS if name in s.recommend]
    with pytest.raises(ValueError, match="name: unknown encoding 'ropey'"):
        when_to_use("ropey")
    with pytest.raises(TypeError, match="name: expected an encoding name"):
        when_to_use(3)  # type: ignore[arg-type]


# --- evidence from a run -------------------------------------------------------------------


def test_extrapolation_evidence_has_the_run_numbers(run_dir: Path, results: dict[str, Any]) -> None:
    advice = _advice(["extrapolation"], run_dir)
    lines = advice["longer-than-trained"].evidence
    line = next(x for x in lines if x.startswith("extrapolation"))
    assert line.startswith("extrapolation (perplexity, chunks mode, L=64 → 512): ")
    for name, verdict in (("alibi", "flat"), ("rope", "does not extrapolate")):
        at_l = _mean(
            results, experiment="extrapolation", encoding=name, mode="chunks", eval_length=64
        )
        far = _mean(
            results, experiment="extrapolation", encoding=name, mode="chunks", eval_length=512
        )
        assert f"{name} {at_l:.3g} → {far:.3g} (×{far / at_l:.3g}, {verdict})" in line
    assert "not in this run: kerple, fire" in line
    flat = min(
        _mean(results, experiment="extrapolation", encoding=n, mode="chunks", eval_length=512)
        / _mean(results, experiment="extrapolation", encoding=n, mode="chunks", eval_length=64)
        for n in ("alibi", "rope", "sinusoidal")
    )
    assert f"flattest: alibi (×{flat:.3g})" in line
    fixed = _advice(["fixed-length"], run_dir)["fixed-length"].evidence
    assert "learned cannot run past 64" in fixed[0]


def test_context_extension_evidence_is_the_best_scaling_at_the_largest_factor(
    run_dir: Path, results: dict[str, Any]
) -> None:
    lines = _advice(["general-llm"], run_dir)["general-llm"].evidence
    line = next(x for x in lines if x.startswith("context extension"))
    assert line.startswith("context extension of RoPE to ×4 (256 tokens, perplexity): ")
    for stage, what in (("zero-shot", "zero-shot"), ("fine-tuned", "after a short fine-tune")):
        means = {
            s: _mean(results, experiment="context-extension", stage=stage, factor=4, scaling=s)
            for s in ("none", "linear", "ntk", "dynamic", "yarn")
        }
        best = min(means, key=means.__getitem__)
        assert f"{what} the best is {best} ({means[best]:.3g}; none {means['none']:.3g})" in line


def test_length_generalization_and_nope_evidence(run_dir: Path, results: dict[str, Any]) -> None:
    lines = _advice(["extrapolation", "simple"], run_dir)["extrapolation-simple"].evidence
    line = next(x for x in lines if x.startswith("length generalisation"))
    for task in ("copy", "reverse"):
        acc = _mean(
            results, experiment="length-generalization", encoding="alibi", task=task, eval_length=32
        )
        assert f"{task} trained up to 16, at 32: alibi {acc:.2f}" in line
    lines = _advice(["simple"], run_dir)["simple-baseline"].evidence
    line = next(x for x in lines if x.startswith("NoPE"))
    for mode in ("causal", "bidirectional"):
        nope = _mean(results, experiment="nope-needs-causality", encoding="nope", mode=mode)
        others = statistics.median(
            _mean(results, experiment="nope-needs-causality", encoding=e, mode=mode)
            for e in ("rope", "alibi")
        )
        assert f"{mode} {nope:.3g} vs {others:.3g} (×{nope / others:.3g})" in line


def test_lost_in_the_middle_only_where_it_was_learned(
    tmp_path: Path, run_dir: Path, results: dict[str, Any]
) -> None:
    lines = _advice(["general-llm"], run_dir)["general-llm"].evidence
    line = next(x for x in lines if x.startswith("lost in the middle"))
    for mode in ("query-last", "query-first"):

        def at(n_pairs: int, gold: int, mode: str = mode) -> float:
            return _mean(
                results,
                experiment="lost-in-the-middle",
                encoding="rope",
                mode=mode,
                n_pairs=n_pairs,
                gold_position=gold,
            )

        trained = sum(at(4, g) for g in range(4)) / 4
        assert f"rope {mode} 4 pairs (trained): {trained:.2f}" in line
        # at 8 pairs: the first, the middle half (positions 2..5) and the last
        middle = sum(at(8, g) for g in range(2, 6)) / 4
        assert (
            f"rope {mode} 8 pairs: U, first {at(8, 0):.2f}, middle {middle:.2f}, "
            f"last {at(8, 7):.2f}" in line
        )
    # at chance (1/n_pairs) retrieval was not learned: no curve is read into it
    for m in results["measurements"]:
        if m["experiment"] == "lost-in-the-middle":
            m["value"] = 1 / m["n_pairs"]
    chance = tmp_path / "chance"
    chance.mkdir()
    (chance / "results.json").write_text(json.dumps(results))
    lines = _advice(["general-llm"], chance)["general-llm"].evidence
    assert lines and not any(x.startswith("lost in the middle") for x in lines)


def test_situations_without_measurements_have_no_evidence(run_dir: Path) -> None:
    advice = guide([], run_dir)
    for a in advice:
        assert bool(a.evidence) == bool(a.situation.measured), a.situation.key
    text = render(advice, run_dir)
    assert text.startswith(f"Evidence: the arena run {run_dir}")
    assert NO_RUN_HINT.split(",")[0] not in text and "measured:" in text


def test_a_run_without_an_experiment_says_so(tmp_path: Path, results: dict[str, Any]) -> None:
    results["measurements"] = [
        m for m in results["measurements"] if m["experiment"] == "nope-needs-causality"
    ]
    d = tmp_path / "nope-only"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(results))
    advice = guide(["general-llm"], d)
    assert advice[0].evidence == ()
    assert "measured: this run did not measure it" in " ".join(render(advice, d).split())


def test_no_run_no_numbers_and_the_hint() -> None:
    text = render(guide())
    assert text.startswith("Evidence: no arena run found")
    flat = " ".join(text.split())
    assert "posenc arena run all --preset quick" in flat
    assert "measured:" not in text
    for s in SITUATIONS:
        assert s.question in flat and ", ".join(s.recommend) in flat
    with pytest.raises(ValueError, match="width"):
        render(guide(), width=10)


def test_a_missing_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such results file"):
        guide([], tmp_path / "nothing")


# --- finding the run -----------------------------------------------------------------------


def _touch_run(root: Path, name: str, mtime: float | None, results: dict[str, Any]) -> Path:
    d = root / "runs" / name
    d.mkdir(parents=True)
    if mtime is not None:
        (d / "results.json").write_text(json.dumps(results))
        os.utime(d / "results.json", (mtime, mtime))
    return d


def test_the_default_run_is_the_newest_with_results(
    tmp_path: Path, results: dict[str, Any]
) -> None:
    assert find_run(tmp_path) is None
    _touch_run(tmp_path, "arena-quick-b", 1_000_000.0, results)
    newest = _touch_run(tmp_path, "arena-full-a", 2_000_000.0, results)
    _touch_run(tmp_path, "arena-quick-c", None, results)  # started, no results yet
    _touch_run(tmp_path, "other-z", 3_000_000.0, results)  # not an arena run
    assert find_run(tmp_path) == newest


# --- the command -------------------------------------------------------------------------


def _posenc(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``posenc ARGV`` through posenc.cli.main once it registers the guide, until then
    through an application with only the guide (the same ``run`` and error handling)."""
    from posenc import cli
    from posenc.cli import guide as guide_cli

    if guide_cli in getattr(cli, "COMMANDS", ()):
        code = cli.main(argv)
    else:
        app = new_app()
        register(app)
        code = run(app, argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_command_help_shows_the_flags_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _posenc(["guide", "--help"], capsys)
    assert code == 0
    assert "Example:" in out and "posenc guide --need-extrapolation --simple" in out
    for flag in (*FLAGS.values(), "--run"):
        assert flag in out


def test_command_narrows_and_uses_the_newest_run(
    tmp_path: Path,
    results: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import posenc.guide.advice as advice

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "72")  # off a terminal the guide is $COLUMNS wide
    monkeypatch.setattr(advice, "PUBLISHED", (tmp_path / "not-installed.json",))
    code, out, _ = _posenc(["guide", "--vision"], capsys)
    assert code == 0
    assert out == render(guide(["vision"]), width=72)
    assert "no arena run found" in out
    # without a run here, the published standard results give the numbers
    published = tmp_path / "published.json"
    published.write_text(json.dumps(results))
    monkeypatch.setattr(advice, "PUBLISHED", (tmp_path / "not-installed.json", published))
    code, out, _ = _posenc(["guide", "--general-llm"], capsys)
    assert code == 0 and f"Evidence: the arena run {published}" in " ".join(out.split())
    newest = _touch_run(tmp_path, "arena-quick-1", 1_000_000.0, results)
    code, out, _ = _posenc(["guide", "--need-extrapolation", "--simple"], capsys)
    assert code == 0
    expected = render(guide(["extrapolation", "simple"], newest), Path("runs/arena-quick-1"), 72)
    assert out == expected
    assert "Evidence: the arena run runs/arena-quick-1" in out
    code, out, _ = _posenc(["guide", "--general-llm", "--run", str(newest)], capsys)
    assert code == 0 and "context extension of RoPE" in out


def test_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _posenc(["guide", "--run", str(tmp_path / "none")], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"error: {tmp_path / 'none'}: no such results file "
        "(expected a run directory or results.json)"
    ]
    code, _, err = _posenc(["guide", "--speed"], capsys)
    assert code == 2 and "No such option: --speed" in err


def test_a_run_whose_models_did_not_learn_is_not_evidence(
    tmp_path: Path, results: dict[str, Any]
) -> None:
    """A pipeline check (``--preset tiny``: perplexities near 350 over 256 bytes, no string
    reversed right even at the trained lengths) is flagged, and none of its language
    models' or unlearned tasks' numbers is quoted as evidence."""
    for m in results["measurements"]:
        language = m["experiment"] in ("extrapolation", "context-extension", "nope-needs-causality")
        if language and m.get("metric") == "perplexity" and m["value"] is not None:
            m["value"] *= 60  # about 350 at L, above a uniform guess's 256
        if m["experiment"] == "length-generalization" and m.get("task") == "reverse":
            m["value"] = 0.0
    d = tmp_path / "runs" / "arena-tiny-20250101-000000"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(results))
    lines = _advice(["extrapolation"], d)["longer-than-trained"].evidence
    assert lines[0].startswith("This run's language models did not learn (median perplexity")
    assert not any(x.startswith(("extrapolation (", "context extension")) for x in lines)
    line = next(x for x in lines if x.startswith("length generalisation"))
    assert "reverse: not learned (no encoding gets a whole string right" in line
    assert "copy trained up to 16, at 32: rope" in line  # copy was learned: still evidence


def test_the_published_run_learned() -> None:
    """The published standard run is evidence: nothing in it is flagged."""
    for advice in guide([], None if published_run() is None else published_run()):
        assert not any("did not learn" in x or "not learned (no" in x for x in advice.evidence)
