"""posenc.hf.layer_plan: each family's plan against the tiny model transformers builds from
the same config (no downloads): the mask every layer receives, the rotation it applies
(with the family's own apply function, so the pair layout is checked too), its softcap,
sinks, temperature and score scale; the config.json dict read as the object; the refusals,
each naming what it cannot read; and the plan running inside a TransformerLM.

Masks are captured from transformers' eager attention (0 where a key is seen, the dtype's
minimum where not) with a window of 4 (ModernBERT: 5, odd) and a chunk of 4 over 12 tokens,
so every window and chunk edge shows.
"""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

from posenc.attn.masks import pattern_mask
from posenc.hf import is_causal, layer_plan, rope_from_hf_config, score_scale
from posenc.models import TransformerLM

transformers = pytest.importorskip("transformers")

SEQ = 12
TINY = {
    "vocab_size": 64,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
KV = {"num_key_value_heads": 2}
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
    "rope_theta": 500000.0,
}

SLIDE_FULL = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]

#: family -> (config class, keywords); transformers' defaults for the rest
FAMILIES = {
    "mistral": ("MistralConfig", {**TINY, **KV, "num_hidden_layers": 2, "sliding_window": 4}),
    "mistral-full": (
        "MistralConfig",
        {**TINY, **KV, "num_hidden_layers": 2, "sliding_window": None},
    ),
    "mixtral": (
        "MixtralConfig",
        {**TINY, **KV, "num_hidden_layers": 2, "sliding_window": 4, "num_local_experts": 2},
    ),
    "qwen2": (
        "Qwen2Config",
        {
            **TINY,
            **KV,
            "num_hidden_layers": 5,
            "use_sliding_window": True,
            "sliding_window": 4,
            "max_window_layers": 2,
        },
    ),
    "qwen3": ("Qwen3Config", {**TINY, **KV, "head_dim": 16, "num_hidden_layers": 3}),
    "gemma2": (
        "Gemma2Config",
        {
            **TINY,
            **KV,
            "head_dim": 16,
            "num_hidden_layers": 4,
            "sliding_window": 4,
            "query_pre_attn_scalar": 24,
            "attn_logit_softcapping": 50.0,
        },
    ),
    "gemma3_text": (
        "Gemma3TextConfig",
        {
            **TINY,
            **KV,
            "head_dim": 16,
            "num_hidden_layers": 6,
            "sliding_window": 4,
            "sliding_window_pattern": 3,
            "query_pre_attn_scalar": 24,
            "rope_parameters": GEMMA3_ROPE,
        },
    ),
    "cohere2": ("Cohere2Config", {**TINY, **KV, "num_hidden_layers": 4, "sliding_window": 4}),
    "gpt_oss": (
        "GptOssConfig",
        {
            **TINY,
            **KV,
            "head_dim": 16,
            "num_hidden_layers": 4,
            "sliding_window": 4,
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
        },
    ),
    "llama4_text": (
        "Llama4TextConfig",
        {
            **TINY,
            **KV,
            "head_dim": 16,
            "intermediate_size_mlp": 64,
            "num_local_experts": 2,
            "num_hidden_layers": 4,
            "attention_chunk_size": 4,
            "floor_scale": 2,
            "attn_scale": 0.5,
            "rope_parameters": LLAMA3,
        },
    ),
    "smollm3": (
        "SmolLM3Config",
        {
            **TINY,
            **KV,
            "num_hidden_layers": 4,
            "no_rope_layer_interval": 2,
            "use_sliding_window": True,
            "sliding_window": 4,
        },
    ),
    **{  # sliding and full layer_types, read by the generic reader (OLMo 3: a RoPE per type)
        model_type: (
            cls,
            {
                **TINY,
                **KV,
                "head_dim": 16,
                "num_hidden_layers": 4,
                "sliding_window": 4,
                "layer_types": SLIDE_FULL,
            },
        )
        for model_type, cls in (
            ("olmo3", "Olmo3Config"),
            ("ministral", "MinistralConfig"),
            ("afmoe", "AfmoeConfig"),
            ("cwm", "CwmConfig"),
            ("mellum", "MellumConfig"),
            ("laguna", "LagunaConfig"),
            ("exaone4", "Exaone4Config"),
            ("exaone_moe", "ExaoneMoeConfig"),
            ("kolibri1", "Kolibri1Config"),
        )
    },
    "exaone4-full": (
        "Exaone4Config",
        {
            **TINY,
            **KV,
            "num_hidden_layers": 2,
            "sliding_window": None,
            "layer_types": ["full_attention"] * 2,
        },
    ),
    "modernbert": (
        "ModernBertConfig",
        {
            **TINY,
            "num_hidden_layers": 4,
            "global_attn_every_n_layers": 2,
            "local_attention": 5,
            "global_rope_theta": 160000.0,
            "local_rope_theta": 10000.0,
            "cls_token_id": 1,
            "sep_token_id": 2,
        },
    ),
}


def make_config(name: str):
    cls, kwargs = FAMILIES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, cls)(**kwargs)


def build(config):
    """The family's base model, eager attention, in eval mode."""
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config, attn_implementation="eager").eval()


def attention_of(layer):
    return layer.attn if hasattr(layer, "attn") else layer.self_attn  # ModernBERT: attn


#: the functions a family's attention rotates q and k with (Llama 4: complex tables)
APPLY_NAMES = ("apply_rotary_pos_emb", "apply_rotary_emb")


def capture(model):
    """Run ``SEQ`` tokens; return each layer's ``(attention_mask, position_embeddings,
    rotated)``: ``rotated`` whether the layer called its module's apply function, watched
    as it runs (what the layer does, not what an attribute of it says)."""
    seen: list = []
    module = importlib.import_module(type(model).__module__)
    originals = {name: getattr(module, name) for name in APPLY_NAMES if hasattr(module, name)}

    def hook(layer, args, kwargs):
        seen.append([kwargs.get("attention_mask"), kwargs.get("position_embeddings"), False])

    def watched(original):
        def apply(*args, **kwargs):
            seen[-1][2] = True
            return original(*args, **kwargs)

        return apply

    handles = [layer.register_forward_pre_hook(hook, with_kwargs=True) for layer in model.layers]
    try:
        for name, original in originals.items():
            setattr(module, name, watched(original))
        with torch.no_grad():
            model(input_ids=torch.arange(3, 3 + SEQ)[None])
    finally:
        for name, original in originals.items():
            setattr(module, name, original)
        for h in handles:
            h.remove()
    assert len(seen) == len(model.layers) and originals
    return [tuple(entry) for entry in seen]


def visible(mask, causal: bool) -> torch.Tensor:
    """``[SEQ, SEQ]``: True where transformers' mask lets a query see a key."""
    if mask is None:  # no mask at all: every key (every earlier one, causal)
        full = torch.ones(SEQ, SEQ, dtype=torch.bool)
        return full.tril() if causal else full
    return mask[0, 0] == 0


def ours_visible(spec, causal: bool) -> torch.Tensor:
    """``[SEQ, SEQ]``: True where posenc's attention lets a query see a key."""
    positions = torch.arange(SEQ)
    seen = pattern_mask(spec.pattern, positions, positions, causal)
    return torch.ones(SEQ, SEQ, dtype=torch.bool) if seen is None else seen


def rotate_theirs(model, name: str, q, k, embeddings):
    """q, k ``[b, h, s, d]`` rotated by the family's own apply function."""
    module = importlib.import_module(type(model).__module__)
    if name == "llama4_text":  # complex tables, applied before the heads move: [b, s, h, d]
        q2, k2 = module.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), embeddings)
        return q2.transpose(1, 2), k2.transpose(1, 2)
    cos, sin = embeddings
    return module.apply_rotary_pos_emb(q, k, cos, sin)


def rotation_tol(tol, rope, x):
    """transformers' float32 tables (``base ** (2i/d)`` rounded ~log(base)/2 + 5 times, as
    in tests/hf/test_rope.py, then times the position) against posenc's float64 ones, applied to
    ``x``: the tables' error times ``|x1| + |x2|``, plus the rotation's own roundings."""
    largest = (SEQ - 1) * float(rope.inv_freq(SEQ).max())
    factor = rope.attention_factor(SEQ)
    n = math.log(rope.config.base) / 2 + 5 + 3
    return tol(n=n, scale=2 * factor * max(1.0, largest) * x.abs().max().item())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_plan_is_what_transformers_runs(name, tol):
    config = make_config(name)
    plan, causal = layer_plan(config), is_causal(config)
    model = build(config)
    assert len(plan) == config.num_hidden_layers == len(model.layers)
    captured = capture(model)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    q, k = torch.randn(1, heads, SEQ, head_dim), torch.randn(1, heads, SEQ, head_dim)
    local = [i for i, spec in enumerate(plan) if spec.pattern.local]
    assert all(captured[i][0] is not None for i in local)  # a window or chunk was masked
    for i, (spec, layer, (mask, embeddings, rotated)) in enumerate(
        zip(plan, model.layers, captured, strict=True)
    ):
        attention = attention_of(layer)
        assert attention.is_causal == causal, i
        # the mask this layer attends with, key by key
        assert torch.equal(ours_visible(spec, causal), visible(mask, causal)), (i, spec)
        # the rotation it applies (the family's apply function: layout, base, scaling)
        assert (spec.encoding is not None) == rotated, i
        if spec.encoding is not None:
            ours = spec.encoding(q, k, torch.arange(SEQ))
            theirs = rotate_theirs(model, name, q, k, embeddings)
            for a, b in zip(ours, theirs, strict=True):
                torch.testing.assert_close(a, b, **rotation_tol(tol, spec.encoding, q))
        # what the scores see beyond the mask
        assert spec.softcap == getattr(attention, "attn_logit_softcapping", None), i
        assert spec.sinks == hasattr(attention, "sinks"), i
        tuned = getattr(attention, "attn_temperature_tuning", False) and not rotated
        assert (spec.temperature is not None) == bool(tuned), i
        if tuned:
            assert spec.temperature.floor_scale == attention.floor_scale
            assert spec.temperature.attn_scale == attention.attn_scale
        scaling = getattr(attention, "scaling", attention.head_dim**-0.5)  # ModernBERT's literal
        assert score_scale(config) == pytest.approx(scaling, rel=1e-12), i


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_window_attributes_are_the_modules(name):
    """The layer-type attribute each attention module keeps: its ``sliding_window`` (what
    flash attention is given; ModernBERT's is local_attention // 2 + 1, flash's inclusive
    bound), Llama 4's chunk from the layer_types its forward indexes."""
    config = make_config(name)
    plan, model = layer_plan(config), build(config)
    for i, (spec, layer) in enumerate(zip(plan, model.layers, strict=True)):
        attention = attention_of(layer)
        window = getattr(attention, "sliding_window", "absent")
        if name == "modernbert":
            expected = None if spec.window is None else spec.window // 2 + 1
            assert window == expected, i
        elif name.startswith(("mistral", "mixtral")):
            assert config.sliding_window == spec.window, i
        elif name == "llama4_text":
            assert (config.layer_types[i] == "chunked_attention") == (spec.chunk is not None)
        elif name.startswith(("exaone", "kolibri")):  # the config's window on every layer
            assert window == config.sliding_window, i
            assert attention.is_sliding == (spec.window is not None), i
        elif window != "absent":
            assert window == spec.window, i


def describe(plan):
    return [
        (s.window, s.chunk, s.sinks, s.softcap, s.temperature, s.encoding and s.encoding.config)
        for s in plan
    ]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_config_json_reads_as_the_object(name):
    config = make_config(name)
    assert describe(layer_plan(config.to_dict())) == describe(layer_plan(config))
    assert score_scale(config.to_dict()) == score_scale(config)
    assert is_causal(config.to_dict()) == is_causal(config)


BASE = {**TINY, "max_position_embeddings": 64}

#: config.json files as older checkpoints have them: no layer_types, the keys their config
#: class derives it from, and the legacy RoPE keys
LEGACY = {
    "gemma3": {
        **BASE,
        "model_type": "gemma3_text",
        "head_dim": 16,
        "num_hidden_layers": 6,
        "sliding_window": 4,
        "sliding_window_pattern": 3,
        "query_pre_attn_scalar": 24,
        "attn_logit_softcapping": None,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 20000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    },
    "modernbert": {
        **BASE,
        "model_type": "modernbert",
        "num_hidden_layers": 4,
        "global_attn_every_n_layers": 3,
        "local_attention": 6,
        "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "cohere2": {
        **BASE,
        "model_type": "cohere2",
        "num_hidden_layers": 4,
        "sliding_window": 4,
        "sliding_window_pattern": 2,
        "rope_theta": 10000.0,
    },
    "qwen2": {
        **BASE,
        "model_type": "qwen2",
        "num_hidden_layers": 4,
        "use_sliding_window": True,
        "sliding_window": 4,
        "max_window_layers": 1,
        "rope_theta": 10000.0,
    },
    "qwen2-off": {
        **BASE,
        "model_type": "qwen2",
        "num_hidden_layers": 4,
        "use_sliding_window": False,
        "sliding_window": 4,
        "max_window_layers": 1,
        "rope_theta": 10000.0,
    },
    "llama4": {
        **BASE,
        "model_type": "llama4_text",
        "num_hidden_layers": 4,
        "no_rope_layers": [],
        "no_rope_layer_interval": 2,
        "attention_chunk_size": 4,
        "attn_temperature_tuning": True,
        "floor_scale": 2,
        "attn_scale": 0.5,
        "head_dim": 16,
        "rope_scaling": LLAMA3,
    },
    "smollm3": {
        **BASE,
        "model_type": "smollm3",
        "num_hidden_layers": 4,
        "no_rope_layers": [1, 1, 0, 1],
        "use_sliding_window": True,
        "sliding_window": 4,
        "rope_theta": 2000000.0,
    },
    "gemma2": {
        **BASE,
        "model_type": "gemma2",
        "head_dim": 16,
        "num_hidden_layers": 3,
        "sliding_window": 4,
        "query_pre_attn_scalar": 24,
        "attn_logit_softcapping": 50.0,
        "rope_theta": 10000.0,
    },
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_config_json_reads_as_transformers_derives_it(name):
    """posenc derives layer_types (and nests per-type RoPE) from an old config.json by the
    rule of its config class, and gets the object transformers builds from it."""
    raw = LEGACY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(**raw)
    assert describe(layer_plan(raw)) == describe(layer_plan(config))
    assert score_scale(raw) == score_scale(config)


def test_window_semantics():
    """A causal window of W: the W keys ending at the query (``kv > q - W``); ModernBERT's
    local_attention L: ``|q - kv| <= L // 2``; a chunk of C: ``q // C == kv // C``."""
    mistral = capture(build(make_config("mistral")))[0][0]
    assert visible(mistral, True)[7].nonzero().flatten().tolist() == [4, 5, 6, 7]
    bert = capture(build(make_config("modernbert")))[1][0]  # layer 1: local, L = 5
    assert visible(bert, False)[7].nonzero().flatten().tolist() == [5, 6, 7, 8, 9]
    llama = capture(build(make_config("llama4_text")))[0][0]  # layer 0: chunked, C = 4
    assert visible(llama, True)[6].nonzero().flatten().tolist() == [4, 5, 6]


def test_layouts_of_the_new_families():
    """gpt-oss rotates halves, Llama 4 interleaved pairs (its complex tables)."""
    assert rope_from_hf_config(make_config("gpt_oss")).config.layout == "half"
    assert rope_from_hf_config(make_config("llama4_text")).config.layout == "interleaved"


def test_per_layer_type_rope_parameters():
    config = make_config("gemma3_text")
    local = rope_from_hf_config(config, layer_type="sliding_attention")
    full = rope_from_hf_config(config, layer_type="full_attention")
    assert (local.config.base, local.scaling.rope_type) == (10000.0, "default")
    assert (full.config.base, full.scaling.rope_type, full.scaling.factor) == (1e6, "linear", 8.0)
    with pytest.raises(ValueError, match=r"pass layer_type=.*layer_plan"):
        rope_from_hf_config(config)
    with pytest.raises(ValueError, match=r"layer_type must be one of .*got 'chunked_attention'"):
        rope_from_hf_config(config, layer_type="chunked_attention")
    flat = make_config("qwen2")  # a flat dict is every layer type's
    assert rope_from_hf_config(flat, layer_type="sliding_attention").config == (
        rope_from_hf_config(flat).config
    )


def changed(name, drop=(), **keys):
    """The family's config.json with ``keys`` set and the keys in ``drop`` removed."""
    raw = {**make_config(name).to_dict(), **keys}
    return {k: v for k, v in raw.items() if k not in drop}


SLIDE = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]

REFUSED = [
    (changed("mistral", layer_types=SLIDE[:2]), "ignores them"),
    (changed("mistral", drop=["sliding_window"]), "has no 'sliding_window'"),
    (changed("mistral", sliding_window=0), "sliding_window must be an int >= 1"),
    (changed("qwen2", use_sliding_window=False), "but use_sliding_window is False"),
    (changed("qwen2", sliding_window=None), "sliding_window is None"),
    (changed("qwen2", drop=["layer_types", "max_window_layers"]), "max_window_layers"),
    (changed("gemma2", layer_types=[*SLIDE[:3], "chunked_attention"]), "chunked_attention"),
    (changed("gemma2", layer_types=SLIDE[:3]), "list of 4 layer types"),
    (changed("gemma2", use_bidirectional_attention=True), "use_bidirectional_attention"),
    (changed("gemma3_text", attn_logit_softcapping=30.0), "never passes it"),
    (changed("gemma3_text", drop=["layer_types", "sliding_window_pattern"]), "sliding_window_p"),
    (changed("gemma3_text", rope_parameters={"rope_type": "default"}), "flat rope_parameters"),
    (
        changed("gemma3_text", drop=["rope_parameters"], rope_theta=1e6),
        "'rope_local_base_freq'",
    ),
    (changed("cohere2", sliding_window=None), "sliding_window is None"),
    (changed("llama4_text", attention_chunk_size=None), "attention_chunk_size is None"),
    (changed("llama4_text", drop=["head_dim"]), "has no 'head_dim'"),
    (changed("llama4_text", rope_parameters={"rope_type": "default"}), "has no 'rope_theta'"),
    (changed("gpt_oss", drop=["rope_parameters"]), "fills in YaRN"),
    (changed("llama4_text", no_rope_layers=[1, 0]), "no_rope_layers must be a list of 4"),
    (changed("llama4_text", no_rope_layers=[1, 2, 1, 0]), "0 \\(NoPE\\) or 1"),
    (changed("llama4_text", attn_scale=-1.0), "attn_scale must be > 0"),
    (changed("smollm3", use_sliding_window=False), "but use_sliding_window is False"),
    (changed("modernbert", local_attention=None), "local_attention is None"),
    (
        changed("modernbert", drop=["layer_types", "global_attn_every_n_layers"]),
        "global_attn_every_n_layers",
    ),
    ({"model_type": "phi3", **BASE, "sliding_window": 2047}, "sets sliding_window=2047"),
    ({"model_type": "llama", **BASE, "attention_chunk_size": 8}, "attention_chunk_size"),
    ({"model_type": "qwen3_next", **BASE, "layer_types": SLIDE[:2]}, "layer_types"),
    # AFMoE reads as Cohere2, but posenc has not read how its class derives layer_types
    (
        {
            "model_type": "afmoe",
            **BASE,
            "num_hidden_layers": 4,
            "head_dim": 16,
            "sliding_window": 8,
        },
        "the config has no 'layer_types'",
    ),
    ({"model_type": "my_model", **BASE, "num_hidden_layers": 2}, "pass layout="),
    (transformers.Gemma3Config().to_dict(), r"layer_plan\(config.text_config\)"),
]


@pytest.mark.parametrize(
    ("config", "named"), REFUSED, ids=[f"{c.get('model_type')}: {n}" for c, n in REFUSED]
)
def test_refusals_name_what_cannot_be_read(config, named):
    with pytest.raises(ValueError, match=named):
        layer_plan(config)


def test_unknown_model_types():
    """A model type posenc has not read: one RoPE on every layer, when nothing makes its
    layers differ; what a plan does not hold is not guessed for it."""
    config = transformers.LlamaConfig(**TINY, num_hidden_layers=3)
    plan = layer_plan(config)
    assert len(plan) == 3 and len({id(s.encoding) for s in plan}) == 1
    assert plan[0].encoding.config == rope_from_hf_config(config).config
    assert not any(s.pattern.local or s.sinks or s.softcap for s in plan)
    for read in (score_scale, is_causal):
        with pytest.raises(ValueError, match="has not read the attention of model_type 'llama'"):
            read(config)
    raw = {"model_type": "my_model", **BASE, "num_hidden_layers": 2, "head_dim": 16}
    assert layer_plan(raw, layout="interleaved")[0].encoding.config.layout == "interleaved"


def test_transformer_lm_runs_each_plan():
    for name in sorted(FAMILIES):
        config = make_config(name)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        model = TransformerLM(
            vocab_size=32,
            dim=heads * head_dim,
            n_layers=config.num_hidden_layers,
            n_heads=heads,
            n_kv_heads=kv,
            causal=is_causal(config),
            plan=layer_plan(config),
        )
        logits = model(torch.randint(0, 32, (2, SEQ)))
        assert logits.shape == (2, SEQ, 32), name
        assert torch.isfinite(logits).all(), name
