"""posenc.arena.reporting.summary: the "What this run says" sentences of the fake results."""

from __future__ import annotations

from posenc.arena.reporting.summary import summary


def test_summary_extrapolation(fake_results):
    sentences = summary(fake_results)
    good = next(s for s in sentences if s.startswith("Extrapolated"))
    bad = next(s for s in sentences if s.startswith("Did not extrapolate"))
    cannot = next(s for s in sentences if s.startswith("Could not run"))
    assert "chunks mode" in good and "alibi" in good and "sinusoidal" not in good
    assert "sinusoidal" in bad and "×512" in bad  # by how much
    assert "rope" in bad and "alibi" not in bad
    assert "learned cannot run past 64" in cannot and "training length" in cannot


def test_summary_other_experiments(fake_results):
    text = "\n".join(summary(fake_results))
    assert "Context extension ×4: best zero-shot yarn" in text
    assert "best fine-tuned yarn" in text and "with none" in text
    assert "Length generalisation (copy, trained up to 16): at 16 the best is rope" in text
    assert "at 32 the best is alibi (0.80), ahead of nope (0.60)" in text
    assert "NoPE works causally" in text and "NoPE fails bidirectionally" in text
    assert "rope U (both ends above the middle): first 0.90, middle 0.63, last 0.90" in text
    assert "hf:sshleifer/tiny-gpt2 U (both ends above the middle): first 0.72" in text
    assert "Retrieval in distribution (accuracy, 2 seeds; 4 pairs" in text


def test_summary_says_what_was_not_learned(fake_results):
    """Near-chance retrieval is called unlearned, not read as a curve, and not at more pairs
    either, where a score above 1.5x that pair count's chance (0.2 > 1.5 / 8) is still noise
    of a model at chance where it trained; an exact match of 0 everywhere past training is
    said as such."""
    for m in fake_results["measurements"]:
        if m["experiment"] == "lost-in-the-middle" and m["encoding"] == "rope":
            m["value"] = 0.01 if m["n_pairs"] == 4 else 0.2 + 0.1 * (m["gold_position"] == 0)
        if m["experiment"] == "length-generalization" and m["eval_length"] > m["train_length"]:
            m["value"] = 0.0
    text = "\n".join(summary(fake_results))
    assert "not learned, so no curve to read: rope 0.01 (at 4 pairs a random value" in text
    assert "not learned, so no curve to read: rope 0.21 (at 4 pairs" in text
    assert "rope primacy" not in text and "rope U" not in text
    assert "no encoding gets a whole string right at 32" in text


def test_summary_flat_nope_is_said(fake_results):
    for m in fake_results["measurements"]:
        if m["experiment"] == "nope-needs-causality" and m["encoding"] == "nope":
            m["value"] = 4.0
    text = "\n".join(summary(fake_results))
    assert "NoPE does not fail bidirectionally" in text


def test_summary_judges_extrapolation_in_chunks_mode(fake_results):
    """Press et al.'s non-overlapping evaluation: a flat sliding-window curve (the extra
    context of long windows) does not make an encoding that degrades in chunks extrapolate."""
    for m in fake_results["measurements"]:
        if (m["experiment"], m["encoding"], m.get("mode")) == ("extrapolation", "rope", "sliding"):
            m["value"] = 5.0
    sentences = summary(fake_results)
    good = next(s for s in sentences if s.startswith("Extrapolated"))
    bad = next(s for s in sentences if s.startswith("Did not extrapolate"))
    assert "(perplexity, chunks mode:" in good and "rope" not in good
    assert "(perplexity, chunks mode)" in bad and "rope (6 at L=64, 27 at 512, ×4.5)" in bad


def test_the_leader_names_every_encoding_of_a_tie():
    """Four encodings at exactly 1.0: a tie, named together, not one of them as the best."""
    from posenc.arena.reporting.rows import leader

    rows = [
        {"encoding": name, "mean": mean, "std": 0.0, "n": 3}
        for name, mean in [("sinusoidal", 1.0), ("rope", 1.0), ("nope", 0.5), ("t5", 1.0)]
    ]
    text = leader(rows, lower=False, fmt=lambda x: f"{x:.2f}")
    assert text.startswith("sinusoidal, rope and t5 tie (1.00)")
    assert "nope (0.50)" in text
    alone = leader(rows[:1] + rows[2:3], lower=False, fmt=lambda x: f"{x:.2f}")
    assert alone.startswith("sinusoidal (1.00), ahead of nope")
    assert leader(rows[:2], lower=False) == "sinusoidal and rope tie (1)"


def test_a_run_whose_models_did_not_learn_is_said_to_be_a_pipeline_check(fake_results):
    """Perplexities near 350 over 256 bytes (the tiny preset): the report says first that the
    run is a pipeline check and reads nothing into its language models (the guide's rule,
    one function), while the retrieval and copy tasks keep their own judgements."""
    from posenc.arena.reporting.reading import not_learned

    for m in fake_results["measurements"]:
        if m["experiment"] in ("extrapolation", "context-extension", "nope-needs-causality"):
            m["value"] = 350.0 + m.get("eval_length", 0) % 7
    lines = summary(fake_results)
    assert lines[0].startswith("A pipeline check, not evidence: this run's language models")
    assert not_learned(fake_results["measurements"]) in lines[0]
    text = "\n".join(lines)
    assert "extrapolat" not in text.split("\n", 1)[1].lower()
    assert "NoPE works causally" not in text and "NoPE fails" not in text
    assert "Length generalisation" in text  # a task the models may have learned
