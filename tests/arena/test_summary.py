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
