"""The configs ``posenc conform`` is checked on (issue 43 names the first five), saved
with transformers' config classes at their real contexts and frequencies, with narrow heads
(the comparison is per rotary pair, so the width only sets how many pairs), Qwen2.5-1M's
dual chunk attention, gpt-oss's unrounded YaRN and a YaRN that states its attention
factor. ``scripts/engines_table.py`` runs them through every engine for the
docs and records vLLM's answers (``tests/engines/data/vllm.json``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import transformers as T

__all__ = ["NAMED"]


def llama31() -> Any:
    return T.LlamaConfig(
        hidden_size=64, num_attention_heads=2, max_position_embeddings=131072,
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    )  # fmt: skip


def qwen2_yarn() -> Any:
    return T.Qwen2Config(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=131072, rope_theta=1e6,
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 32768},
    )  # fmt: skip


def phi3_longrope() -> Any:
    return T.Phi3Config(
        hidden_size=64, num_attention_heads=2, max_position_embeddings=131072,
        original_max_position_embeddings=4096, rope_scaling={"rope_type": "longrope",
        "short_factor": [1.0 + i / 100 for i in range(16)],
        "long_factor": [1.5 + i for i in range(16)]},
    )  # fmt: skip


def gemma3() -> Any:
    return T.Gemma3TextConfig(
        hidden_size=64, num_attention_heads=2, head_dim=32, max_position_embeddings=131072,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1e6}},
    )  # fmt: skip


def deepseek_v3() -> Any:
    return T.DeepseekV3Config(
        hidden_size=64, num_attention_heads=2, qk_rope_head_dim=32, max_position_embeddings=163840,
        rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    )  # fmt: skip


def qwen25_1m() -> Any:
    return T.Qwen2Config(
        hidden_size=64, num_attention_heads=2, max_position_embeddings=1010000, rope_theta=1e7,
        dual_chunk_attention_config={"chunk_size": 262144, "local_size": 8192,
                                     "original_max_position_embeddings": 262144},
    )  # fmt: skip


def gpt_oss() -> Any:
    """gpt-oss-20b's rotation: YaRN whose correction range is not rounded."""
    return T.GptOssConfig(
        hidden_size=64, num_attention_heads=2, head_dim=64, num_key_value_heads=1,
        max_position_embeddings=131072, rope_parameters={"rope_type": "yarn", "factor": 32.0,
        "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 4096,
        "truncate": False, "rope_theta": 150000.0},
    )  # fmt: skip


def yarn_attention_factor() -> Any:
    """Qwen2's YaRN with its attention factor stated (1: no temperature), as a config may."""
    config = qwen2_yarn()
    config.rope_parameters = {**config.rope_parameters, "attention_factor": 1.0}
    return config


#: name -> a function that builds the config
NAMED: dict[str, Callable[[], Any]] = {
    "llama3.1": llama31,
    "qwen2-yarn": qwen2_yarn,
    "phi3-longrope": phi3_longrope,
    "gemma3": gemma3,
    "deepseek-v3": deepseek_v3,
    "qwen2.5-1m": qwen25_1m,
    "gpt-oss": gpt_oss,
    "qwen2-yarn-attention-factor": yarn_attention_factor,
}
