"""An inspection report shown: render_report's text and frequencies_figure's lines."""

import math

import pytest
import torch

import posenc
from posenc.hf import (
    frequencies_figure,
    inspect_checkpoint,
    render_report,
)

transformers = pytest.importorskip("transformers")

T = transformers


def lines_of(fig):
    (ax,) = fig.axes
    return {
        line.get_label(): line.get_ydata() for line in ax.get_lines() if line.get_label()[0] != "_"
    }


def test_figure_draws_the_checkpoint_and_its_plans(saved, tmp_path):
    pytest.importorskip("matplotlib")
    report = inspect_checkpoint(saved["gpt-neox-20b"], target=8192)
    drawn = lines_of(frequencies_figure(report))
    ropes = {"checkpoint (none)": report.rotary.rope}
    ropes.update({f"{p.method} (plan)": p.rope for p in report.extensions})
    assert set(drawn) == set(ropes)
    for label, rope in ropes.items():
        expected = (2 * math.pi / rope.inv_freq(8192)).numpy()
        assert len(drawn[label]) == 12  # 24 rotary dims: 12 pairs
        assert torch.allclose(torch.as_tensor(drawn[label]), torch.as_tensor(expected), rtol=0)
    # a scaled checkpoint without a target: its own scaling at its extended length
    phi = inspect_checkpoint(saved["phi-3-mini-128k"])
    drawn = lines_of(frequencies_figure(phi))
    expected = 2 * math.pi / phi.rotary.rope.inv_freq(131072)
    assert torch.equal(torch.as_tensor(drawn["checkpoint (longrope)"]), expected)
    path = posenc.plot.save(frequencies_figure(phi), tmp_path / "phi.png")
    assert path.stat().st_size > 0


def test_figure_refuses_what_it_cannot_draw(saved):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="rotary checkpoints; 'gpt2' uses learned"):
        frequencies_figure(inspect_checkpoint(saved["gpt2"]))
    with pytest.raises(ValueError, match="--target"):
        frequencies_figure(inspect_checkpoint(saved["mistral-7b"]))


def test_render_names_the_key_facts(saved):
    text = "\n".join(render_report(inspect_checkpoint(saved["phi-3-mini-128k"])))
    for fact in ("phi3", "longrope", "[48 values", "original context: 4096", "131072", "half"):
        assert fact in text


def test_figure_of_a_scaled_checkpoint_marks_its_own_reach_not_the_target(tmp_path, legacy):
    pytest.importorskip("matplotlib")
    report = inspect_checkpoint(legacy("llama-3.1-8b"), target=100000)
    assert report.extensions == ()  # within the 131072 its llama3 scaling reaches
    fig = frequencies_figure(report)
    (ax,) = fig.axes
    title = fig.texts[0].get_text() if fig.texts else ax.get_title()
    assert "8192 -> 131072" in title and "100000" not in title
    marked = sorted(
        float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_label()[0] == "_"
    )
    assert marked == [8192.0, 131072.0]
    notes = [t.get_text() for t in ax.texts]
    assert "extended context 131072" in notes and not any("100000" in n for n in notes)
    drawn = lines_of(fig)
    assert set(drawn) == {"checkpoint (llama3)", "none"}
    expected = 2 * math.pi / report.rotary.rope.inv_freq(131072)
    assert torch.equal(torch.as_tensor(drawn["checkpoint (llama3)"]), expected)


@pytest.mark.parametrize("report", [None, "gpt2", {"rotary": None}])
def test_a_report_that_is_no_report_is_named(report):
    with pytest.raises(TypeError, match="report must be a CheckpointReport"):
        render_report(report)
    with pytest.raises(TypeError, match="report must be a CheckpointReport"):
        frequencies_figure(report)


@pytest.mark.parametrize(
    ("width", "error"), [(0, ValueError), (-1, ValueError), (2**40, ValueError),
                         ("80", TypeError), (80.0, TypeError), (True, TypeError), (None, TypeError)]
)  # fmt: skip
def test_a_bad_width_is_named(saved, width, error):
    report = inspect_checkpoint(saved["gpt2"])
    with pytest.raises(error, match="width must be"):
        render_report(report, width=width)
