"""posenc.hf.mrope: every transformers model type whose rotary embedding has
M-RoPE sections, rotated at random [3, batch, seq] ids by posenc (rope_from_hf_config) and
by the family's own rotary embedding and apply function; each is exact or refused."""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest
import torch

from posenc.hf import rope_from_hf_config
from posenc.hf.mrope import fit_interleaved
from posenc.hf.records import MODEL_TYPES
from posenc.rotary import MRoPE

MROPE_FAMILIES = {name for name, record in MODEL_TYPES.items() if record.mrope is not None}

transformers = pytest.importorskip("transformers")

#: where transformers' default config does not build its own rotary embedding, what a
#: shipping config.json sets: GLM-4.1V and GLM-Image rotate half of each head
#: (partial_rotary_factor 0.5: the default sections need 32 pairs), GLM-4.5V's and
#: Qwen3-Omni's heads are 128 wide (the default hidden_size / heads is not)
_HALF_HEAD = {"rope_parameters": {"partial_rotary_factor": 0.5}}
FIXUPS = {
    "glm4v": _HALF_HEAD,
    "glm46v": _HALF_HEAD,
    "glm_image": _HALF_HEAD,
    "glm4v_moe": {"head_dim": 128},
    "qwen3_omni_moe": {"head_dim": 128},
}


def modeling(model_type: str):
    package = transformers.CONFIG_MAPPING[model_type].__module__.split(".")[2]
    return importlib.import_module(f"transformers.models.{package}.modeling_{package}")


def mrope_model_types() -> list[str]:
    """The model types whose modeling module reads ``mrope_section``: transformers' list."""
    found = []
    for model_type in transformers.CONFIG_MAPPING:
        try:
            source = inspect.getsource(modeling(model_type))
        except (ImportError, OSError, TypeError):
            continue
        if "mrope_section" in source:
            found.append(model_type)
    return sorted(found)


def built(model_type: str):
    """``(config, text config, rotary embedding, apply function)`` of the default config
    with :data:`FIXUPS`, or None where the module has no text rotary embedding to build."""
    module = modeling(model_type)
    embeddings = [
        c
        for name, c in vars(module).items()
        if name.endswith("RotaryEmbedding") and "Vision" not in name and inspect.isclass(c)
    ]
    apply = getattr(module, "apply_rotary_pos_emb", None)
    if not embeddings or apply is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = transformers.CONFIG_MAPPING[model_type]()
            text = config.get_text_config() if hasattr(config, "get_text_config") else config
            text = getattr(text, "text_config", text)  # an Omni thinker inside the config
            for prefix, keys in FIXUPS.items():
                if model_type.startswith(prefix):
                    for key, value in keys.items():
                        old = getattr(text, key, None)
                        setattr(text, key, {**old, **value} if isinstance(value, dict) else value)
            return config, text, embeddings[0](config=text), apply
        except (TypeError, ValueError, RuntimeError, AttributeError, KeyError):
            return None  # a sub-config (vision, audio) or one this generic builder cannot make


def rotate(text, embedding, apply, ids: torch.Tensor, q: torch.Tensor):
    """q rotated by the family's own functions at ``ids`` ``[3, batch, seq]``."""
    cos, sin = embedding(torch.zeros(1, ids.shape[-1], q.shape[-1]), ids)
    return apply(q, q.clone(), cos, sin)[0]


def test_every_mrope_model_type_is_exact_or_refused():
    """Random ids up to 50 on each axis (unequal axes, so a pair on the wrong axis or with
    the wrong frequency moves by O(1)): posenc's rotation equals the family's within the
    float32 angle error of transformers (50 rad * 2^-24 per angle, |q| < 5: < 2e-5), on
    the rotary slice and the channels past it; or a ValueError. Never a third outcome."""
    exact, refused, unbuilt, wrong = [], [], [], []
    gen = torch.Generator().manual_seed(0)
    for model_type in mrope_model_types():
        found = built(model_type)
        if found is None:
            unbuilt.append(model_type)
            continue
        config, text, embedding, apply = found
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        ids = torch.randint(0, 50, (3, 2, 7), generator=gen)
        q = torch.randn(2, 2, 7, head_dim, generator=gen).clamp(-5, 5)
        try:
            theirs = rotate(text, embedding, apply, ids, q)
        except (TypeError, ValueError, RuntimeError, AttributeError):
            unbuilt.append(model_type)  # the family's own functions refuse these ids
            continue
        try:
            rope = rope_from_hf_config(text)
            ours, _ = rope(q, q.clone(), positions=ids)
        except ValueError:
            refused.append(model_type)
            continue
        same = torch.allclose(ours, theirs.to(ours.dtype), atol=2e-5, rtol=0)
        if same and isinstance(rope, MRoPE) and rope_from_hf_config(config).config == rope.config:
            exact.append(model_type)
        else:
            wrong.append(model_type)
    assert not wrong, f"rotated other than transformers rotates: {wrong}"
    assert set(exact) <= set(MROPE_FAMILIES)
    # transformers 5.24: 38 exact; refused: Qwen3-Omni's code predictor (plain RoPE, which
    # takes no [3, b, s] ids); not built: vision and audio sub-configs, and the families
    # whose default config fails in transformers too (Cohere Compass, HunYuan-VL, NeoMME)
    assert len(exact) >= 38, f"{len(exact)} exact, {len(refused)} refused: {refused}; {unbuilt}"
    print(f"M-RoPE: {len(exact)} exact, {len(refused)} refused, {len(unbuilt)} not built")


def test_ernie_puts_height_and_width_first_and_time_last():
    """ERNIE-4.5-VL: the config's (h, w, t) = (22, 22, 20) are pairs 0-43 alternating h, w
    and pairs 44-63 on t, read back from posenc's rotation of each axis alone."""
    config = transformers.Ernie4_5_VLMoeConfig()
    rope = rope_from_hf_config(config)
    assert rope.config.mrope_section == (20, 22, 22) and rope.config.layout == "interleaved"
    axes = []
    for axis in range(3):  # move one axis: the pairs that turn follow it
        ids = torch.zeros(3, 1, 1, dtype=torch.long)
        ids[axis] = 7
        _, sin = rope.rotation(ids)
        axes.append(sin[0, 0] != 0)  # sin, not cos: cos(7θ) rounds to 1 at low frequencies
    expected = [[i >= 44 for i in range(64)], [i < 44 and i % 2 == 0 for i in range(64)]]
    expected.append([i < 44 and i % 2 == 1 for i in range(64)])
    assert [a.tolist() for a in axes] == expected


def test_glm4v_rotates_interleaved_pairs_of_half_of_each_head():
    found = built("glm4v")
    assert found is not None
    _, text, embedding, apply = found
    rope = rope_from_hf_config(text)
    assert rope.config.layout == "interleaved" and rope.config.mrope_section == (8, 12, 12)
    glm46v = transformers.Glm46VConfig(text_config=text.to_dict())  # GLM-4.6V: the same
    assert rope_from_hf_config(glm46v).config == rope.config
    q = torch.randn(1, 1, 4, 128)
    ids = torch.randint(0, 9, (3, 1, 4))
    ours, _ = rope(q, q.clone(), positions=ids)
    assert torch.equal(ours[..., 64:], q[..., 64:])  # the half past the rotary slice
    torch.testing.assert_close(ours, rotate(text, embedding, apply, ids, q), atol=2e-5, rtol=0)


def test_interleaved_sections_are_fitted_as_transformers_moves_pairs():
    """transformers' interleaved families start every pair on t and move pairs to h and w
    within the pairs there are: Qwen3-Omni's talker (32 pairs, [24, 20, 20]) has 11 on h."""
    assert fit_interleaved((24, 20, 20), 64) == (24, 20, 20)
    assert fit_interleaved((24, 20, 20), 32) == (11, 11, 10)
    assert fit_interleaved((0, 0, 0), 8) == (8, 0, 0)
