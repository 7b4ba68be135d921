"""The attention figure on a tiny arena run: the images drawn are the loaded model's
attention maps, and the run's models load back as they were trained. The figure takes the
model; ``posenc plot attention --run`` (:func:`posenc.cli.plot.attention_of_run`) loads it
from the run."""

from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch

from posenc.arena import load_model, run_arena
from posenc.arena.files.atomic import read_json
from posenc.arena.measuring.trained import trained_encodings
from posenc.arena.running.presets import TINY
from posenc.cli.plot import attention_of_run
from posenc.models import attention_maps
from posenc.plot import get, save
from posenc.plot.attention import attention, text_ids, token_labels

TEXT = "def f(x):\n  return x"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("arena") / "run"
    run_arena(["extrapolation"], TINY, out=out, encodings=["rope", "alibi"], bars=False)
    return str(out)


def panels(fig):
    return [ax for ax in fig.get_axes() if ax.get_images()]


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_images_are_the_models_attention_maps(run, encoding):
    model = load_model(run, encoding)
    fig = attention(model, text=TEXT)
    expected = attention_maps(model, text_ids(TEXT))[:, 0].numpy()  # [layers, heads, s, s]
    n_layers, n_heads, seq = model.n_layers, model.n_heads, len(TEXT.encode())
    axes = panels(fig)
    assert len(axes) == n_layers * n_heads
    clims = {ax.get_images()[0].get_clim() for ax in axes}
    assert len(clims) == 1  # one colour scale
    for n, ax in enumerate(axes):
        layer, head = divmod(n, n_heads)
        drawn = np.asarray(ax.get_images()[0].get_array())
        assert drawn.shape == (seq, seq)
        np.testing.assert_array_equal(drawn, expected[layer, head])
        np.testing.assert_allclose(drawn.sum(-1), 1.0, rtol=1e-5)
        assert (drawn[np.triu_indices(seq, 1)] == 0).all()  # causal: no future key
        assert ax.get_title() == f"layer {layer}, head {head}"
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("key (token)", "query (token)")
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == token_labels(TEXT)
        assert labels[:4] == ["d", "e", "f", "␣"] and "\\n" in labels
    assert encoding in fig.get_suptitle()
    assert len(fig.get_axes()) == len(axes) + 1  # and one colour bar


def test_layer_and_head_choose_one_panel(run):
    fig = attention(load_model(run, "rope"), text="abc", layer=0, head=1)
    (ax,) = panels(fig)
    assert ax.get_title() == "layer 0, head 1"
    expected = attention_maps(load_model(run, "rope"), text_ids("abc"))[0, 0, 1]
    np.testing.assert_array_equal(np.asarray(ax.get_images()[0].get_array()), expected.numpy())


def test_registry_and_files(run, tmp_path):
    fig = get("attention")(load_model(Path(run), "alibi"))  # the default text
    assert save(fig, tmp_path / "a.png").stat().st_size > 0
    assert save(fig, tmp_path / "a.svg").stat().st_size > 0


def test_load_model_rebuilds_the_trained_model(run):
    assert trained_encodings(run) == {"alibi": [0], "rope": [0]}
    model = load_model(run, "rope")
    assert not model.training
    config = read_json(Path(run) / "run.json")["config"]["preset"]["model"]
    assert (model.dim, model.n_layers, model.n_heads) == (
        config["dim"],
        config["n_layers"],
        config["n_heads"],
    )
    # the weights are the trained ones, not a fresh initialisation
    fresh = model.state_dict()
    trained = safetensors.torch.load_file(
        Path(run) / "models" / "train--lm--rope--seed0.safetensors"
    )
    for name, tensor in fresh.items():
        assert torch.equal(tensor, trained[name])


def test_token_labels_escape_whitespace_and_bytes():
    assert token_labels("a b\n\té") == ["a", "␣", "b", "\\n", "\\t", "é", "\\xa9"]
    assert len(token_labels("日本")) == len("日本".encode())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "run: pass run="),
        ({"encoding": "t5"}, r"encoding: .*no trained 'lm' model for 't5'.*alibi \(seeds \[0\]\)"),
        ({"seed": 3}, "with seed 3"),
        ({"model": "mlm"}, "no trained 'mlm' model"),
        ({"model": "kv"}, "model must be one of"),
        ({"text": ""}, "text must be a non-empty string"),
        ({"layer": 1}, r"layer must be in \[0, 0\]"),
        ({"layer": -1}, "layer"),
        ({"head": 2}, r"head must be in \[0, 1\]"),
        ({"head": 0.5}, "head must be an int"),
        ({"run": 3}, "run must be a path"),
    ],
)
def test_bad_input(run, kwargs, match):
    kwargs = {"run": run, **kwargs} if kwargs else {}
    with pytest.raises(ValueError, match=match):
        attention_of_run(**kwargs)


def test_the_figure_asks_for_a_model():
    with pytest.raises(ValueError, match="model: pass model="):
        attention()
    with pytest.raises(ValueError, match="model must be a TransformerLM"):
        attention("runs/x")


def test_the_command_draws_the_runs_model(run):
    """``posenc plot attention --run RUN --encoding rope`` draws the model the run trained."""
    fig = attention_of_run(run=run, encoding="rope", text="abc", layer=0, head=0)
    (ax,) = panels(fig)
    expected = attention_maps(load_model(run, "rope"), text_ids("abc"))[0, 0, 0]
    np.testing.assert_array_equal(np.asarray(ax.get_images()[0].get_array()), expected.numpy())
    assert fig.get_suptitle().startswith(f"attention probabilities: rope lm, run {Path(run).name}")


def test_not_a_run_directory(tmp_path):
    with pytest.raises(ValueError, match="not an arena run directory"):
        attention_of_run(run=str(tmp_path), encoding="rope")


def test_text_past_a_learned_models_positions(tmp_path):
    out = tmp_path / "run"
    run_arena(["extrapolation"], TINY, out=out, encodings=["learned"], bars=False)
    long = "x" * (TINY.train_length + 1)
    with pytest.raises(ValueError, match=f"text: {len(long)} bytes"):
        attention(load_model(out, "learned"), text=long)
    fig = attention(load_model(out, "learned"), text="x" * TINY.train_length)
    assert panels(fig)


def test_bidirectional_masked_model(tmp_path):
    """nope-needs-causality's masked model sees every key: no zero triangle."""
    out = tmp_path / "run"
    run_arena(["nope-needs-causality"], TINY, out=out, encodings=["rope"], bars=False)
    assert trained_encodings(out, "mlm") == {"nope": [0], "rope": [0], "sinusoidal": [0]}
    model = load_model(out, "rope", model="mlm")
    assert not model.causal and model.vocab_size == 257
    fig = attention_of_run(run=str(out), encoding="rope", model="mlm", text=TEXT, layer=0, head=0)
    (ax,) = panels(fig)
    drawn = np.asarray(ax.get_images()[0].get_array())
    np.testing.assert_array_equal(drawn, attention_maps(model, text_ids(TEXT))[0, 0, 0].numpy())
    assert (drawn > 0).all()
    assert "mlm" in fig.get_suptitle()
