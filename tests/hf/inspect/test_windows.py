"""What `posenc inspect` says of windows and chunks: the farthest distance a windowed RoPE
layer sees (checked against the masks), and what each extension plan changes for it
(the pairs counted against transformers' own rotary initialisers)."""

import copy
import re

import pytest
import torch

from posenc.attn.masks import AttnPattern
from posenc.hf import inspect_checkpoint, render_report
from posenc.hf.inspect.windows import farthest

transformers = pytest.importorskip("transformers")
from tests.hf.families import make as unscaled  # noqa: E402
from tests.hf.test_layer_plan import make_config  # noqa: E402


@pytest.mark.parametrize(
    ("pattern", "causal"),
    [
        (AttnPattern(window=5), True),
        (AttnPattern(window=5), False),
        (AttnPattern(window=6), False),
        (AttnPattern(chunk=4), True),
        (AttnPattern(chunk=4), False),
    ],
)
def test_farthest_is_the_largest_distance_the_mask_lets_through(pattern, causal):
    positions = torch.arange(40)
    seen = pattern.visible(positions[:, None], positions[None, :], causal)
    distances = (positions[:, None] - positions[None, :]).abs()
    assert farthest(pattern, causal) == int(distances[seen].max())
    assert farthest(AttnPattern(), causal) is None


def inspect_config(config, tmp_path, target=None):
    config.save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path, target=target)
    return report, "\n".join(render_report(report, width=1000))  # one line per fact


def pair_changes(windows):
    """method -> (pairs changed, pairs) from the windows line."""
    found = re.findall(r"(\w+) (\d+) of (\d+) pairs", windows)
    return {method: (int(n), int(total)) for method, n, total in found}


def transformers_changes(config, rotary_class, plans, target):
    """method -> (pairs changed, pairs, attention factor): each plan's config built by
    transformers' own initialiser of its rope type (dynamic at ``target`` tokens), against
    the unscaled one."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    before, _ = rotary_class.compute_default_rope_parameters(config)
    out = {}
    for plan in plans:
        updated = copy.deepcopy(config)
        for key, value in copy.deepcopy(plan.updates).items():
            setattr(updated, key, value)
        rope_type = updated.rope_parameters["rope_type"]
        if rope_type == "default":
            after, factor = rotary_class.compute_default_rope_parameters(updated)
        else:
            after, factor = ROPE_INIT_FUNCTIONS[rope_type](updated, None, seq_len=target)
        changed = int((~torch.isclose(before, after, rtol=1e-5, atol=0)).sum())
        out[plan.method] = (changed, before.numel(), factor)
    return out


@pytest.mark.parametrize(
    ("model_type", "keys", "nope"),
    [("mistral", {"max_position_embeddings": 32768}, 0), ("cohere2", {}, 10)],
)
def test_a_model_whose_rope_layers_are_all_windowed_says_no_plan_reaches_farther(
    tmp_path, model_type, keys, nope
):
    """Mistral (a window of 4096 on all 32 layers) and Cohere2 (4096 on its RoPE layers,
    NoPE full ones): the report names the window and the farthest distance (4095), and,
    with a target, that no plan lets a layer see farther and how many pairs each plan
    rotates differently below the window: transformers' own count."""
    config = transformers.AutoConfig.for_model(model_type, **keys)
    assert config.sliding_window == 4096
    report, text = inspect_config(config, tmp_path)
    assert "no RoPE layer sees a distance past 4095 at any length" in text
    assert re.search(r"\n    0-31 +rope +window 4096\n", text) or model_type != "mistral"
    assert (f"the {nope} full-attention layers are NoPE" in text) == bool(nope)
    target = 4 * config.max_position_embeddings
    report, text = inspect_config(config, tmp_path, target)
    (line,) = [line for line in text.splitlines() if line.startswith("    windows: ")]
    assert "no RoPE layer sees a distance past 4095 at any length" in line
    assert "so no plan lets a layer see farther" in line
    assert ("the NoPE layers take no RoPE scaling" in line) == bool(nope)
    module = f"transformers.models.{model_type}.modeling_{model_type}"
    rotary = getattr(
        __import__(module, fromlist=["x"]), f"{type(config).__name__[:-6]}RotaryEmbedding"
    )
    expected = transformers_changes(config, rotary, report.extensions, target)
    assert set(pair_changes(line)) == set(expected) == {p.method for p in report.extensions}
    for method, (changed, total) in pair_changes(line).items():
        assert (changed, total) == expected[method][:2], method
        if expected[method][2] != 1.0:
            assert f"{method} {changed} of {total} pairs, attention factor " in line
    assert pair_changes(line)["linear"] == (64, 64)  # every pair, below the window too


def test_windowed_and_full_rope_layers_say_which_see_farther(tmp_path):
    """Qwen2 with sliding windows on its upper layers (a flat RoPE for all): the windowed
    RoPE layers see no distance past W - 1, the full ones every distance; the plans widen
    no window."""
    config = make_config("qwen2")
    report, text = inspect_config(config, tmp_path, 4 * config.max_position_embeddings)
    full = sum(1 for spec in report.plan if not spec.pattern.local)
    assert 0 < full < len(report.plan)
    assert "the RoPE layers with a window 4 see no distance past 3 at any length" in text
    assert f"the other {full} RoPE layers see every distance" in text
    assert "a scaling widens no window: the windowed RoPE layers still see distances 0-3" in (
        report.extension_windows
    )
    assert f"the {full} full-attention RoPE layers are the ones that see farther" in (
        report.extension_windows
    )


def test_a_rope_per_layer_type_leaves_the_windowed_layers_alone(tmp_path):
    """Gemma 3 scales its full_attention layers' RoPE only: the windowed ones keep theirs."""
    config = unscaled("gemma3_text")
    report, _ = inspect_config(config, tmp_path, 4 * config.max_position_embeddings)
    assert report.extensions
    assert report.extension_windows.startswith(
        "the plans scale the full_attention layers' RoPE only; the other layers"
    )
    for plan in report.extensions:
        assert (
            plan.updates["rope_parameters"]["sliding_attention"]
            == (config.rope_parameters["sliding_attention"])
        )


def test_a_bidirectional_window_reaches_half_its_width(tmp_path):
    """ModernBERT's local_attention of 5 sees |q - k| <= 2."""
    _, text = inspect_config(make_config("modernbert"), tmp_path)
    assert "the RoPE layers with a window 5 see no distance past 2 at any length" in text


def test_a_model_without_windows_says_nothing_of_them(tmp_path):
    config = transformers.LlamaConfig(num_hidden_layers=2, max_position_embeddings=64)
    report, text = inspect_config(config, tmp_path, 256)
    assert report.plan is None and report.extension_windows == ""
    assert "window" not in text.replace(str(tmp_path), "")
