"""Valid calls of posenc's hf and engines callables (see tests/contract/registry.py).

Configs are tiny ``config.json`` dicts or transformers config objects built here (nothing
is downloaded); :func:`~posenc.hf.inspect_checkpoint` reads a ``config.json`` written
once per process into a temporary folder; :func:`~posenc.engines.conform` compares
against an engine that answers posenc's own float64 tables (the comparison's inputs are
what is probed, not an engine)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from tests.contract.registry import EXEMPT, call, example

from posenc import engines, hf
from posenc.engines.compare import reference_tables

EXEMPT["posenc.hf.CheckpointReport"] = (
    "a frozen record of what inspect_checkpoint read; it holds what it is given "
    "(render_report and frequencies_figure take inspect_checkpoint's only)"
)
EXEMPT["posenc.engines.ConformRow"] = (
    "a frozen record of one comparison conform made; it holds what it is given "
    "(render_rows takes conform's only)"
)


def llama(**keys: Any) -> dict[str, Any]:
    """A tiny Llama ``config.json``: heads of 16, RoPE base 10000, a 2048-token context."""
    return {
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rope_theta": 10000.0, "max_position_embeddings": 2048,
        **keys,
    }  # fmt: skip


def gemma3() -> dict[str, Any]:
    """A tiny Gemma 3 ``config.json``: a RoPE per layer type, a window on the first layer."""
    return {
        "model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2,
        "head_dim": 32, "num_hidden_layers": 2, "sliding_window": 16,
        "max_position_embeddings": 2048, "query_pre_attn_scalar": 32,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
    }  # fmt: skip


def deepseek_v3() -> dict[str, Any]:
    """A tiny DeepSeek-V3 ``config.json``: latent attention with a decoupled RoPE of 16."""
    return {
        "model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 2,
        "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
        "kv_lora_rank": 32, "rope_theta": 10000.0, "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 1024},
    }  # fmt: skip


@functools.cache
def checkpoint() -> str:
    """A folder holding a tiny Llama ``config.json``, written once per process."""
    folder = Path(tempfile.mkdtemp(prefix="posenc-contract-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "config.json").write_text(json.dumps(llama()))
    return str(folder)


def tiny_model() -> Any:
    """A transformers Llama of one narrow layer (randomly initialised, nothing loaded)."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def own_tables(config: Any, jobs: list[Any]) -> list[Any]:
    """An engine that answers posenc's own float64 tables for every job."""
    return [(reference_tables(rope, positions), "posenc", positions) for rope, positions, _ in jobs]


# reading a config
example(
    "posenc.hf.rope_from_hf_config",
    lambda: call(hf.rope_from_hf_config, gemma3(), layout="half", layer_type="full_attention"),
)
example(
    "posenc.hf.latent_rope_from_hf_config",
    lambda: call(hf.latent_rope_from_hf_config, deepseek_v3()),
)
example("posenc.hf.layer_plan", lambda: call(hf.layer_plan, gemma3(), layout="half"))
example("posenc.hf.score_scale", lambda: call(hf.score_scale, gemma3()))
example("posenc.hf.is_causal", lambda: call(hf.is_causal, gemma3()))
example(
    "posenc.hf.permute_for_layout",
    lambda: call(
        hf.permute_for_layout, torch.randn(64, 64), 4, 16, "interleaved", "half", rotary_dim=8
    ),
    # a reordering of rows, exact in any dtype: a complex (or int8, quantized) weight comes
    # back reordered as given, nothing cast
    ok={"weight": ("dtype",)},
)

# extending a context
example(
    "posenc.hf.extension_updates",
    lambda: call(hf.extension_updates, llama(), "yarn", 4.0, original_max_position_embeddings=2048),
)
example(
    "posenc.hf.extend_context",
    lambda: call(
        hf.extend_context, tiny_model(), "yarn", 4.0, original_max_position_embeddings=256
    ),
)

# posenc inside a loaded model
example(
    "posenc.hf.apply",
    lambda: call(
        hf.apply,
        tiny_model(),
        rotary="exact",
        kernel="auto",
        attention="posenc",
        encoding="alibi",
        layers=[0],
    ),
    # None is a choice of rotary and attention (keep the model's own) and of encoding and
    # layers (RoPE stays; every layer); a set of indices is indices
    ok={
        "rotary": ("none",),
        "attention": ("none",),
        "encoding": ("none",),
        "layers": ("none", "set"),
    },
)
example("posenc.hf.undo", lambda: call(hf.undo, hf.apply(tiny_model())))
example("posenc.hf.register_attention", lambda: call(hf.register_attention))

# a checkpoint's report
example(
    "posenc.hf.inspect_checkpoint", lambda: call(hf.inspect_checkpoint, checkpoint(), target=8192)
)
example(
    "posenc.hf.render_report",
    lambda: call(hf.render_report, hf.inspect_checkpoint(checkpoint(), target=8192), width=80),
)
example(
    "posenc.hf.frequencies_figure",
    lambda: call(hf.frequencies_figure, hf.inspect_checkpoint(checkpoint(), target=8192)),
)

# engines
example(
    "posenc.engines.conform",
    # the config by its path (a str: probed as a str; a config object takes None only)
    lambda: call(engines.conform, checkpoint(), past=2.0, engines={"posenc": own_tables}),
)
example(
    "posenc.engines.render_rows",
    lambda: call(
        engines.render_rows,
        engines.conform(checkpoint(), past=1.5, engines={"posenc": own_tables}),
    ),
)
