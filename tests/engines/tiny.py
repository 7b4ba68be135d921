"""Tiny random models for the engines' logits tests (``test_llama_cpp.py``,
``test_vllm.py``): configs whose rotation is scaled at a small original length, so that
200 tokens reach past it (heads 32 wide: vLLM's CPU attention takes no narrower), built
with a fixed seed, and the helpers both tests use."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import torch
import transformers as T

from posenc.engines.gguf_rope import gguf_rope, rope_cache
from posenc.engines.llama_engine import gguf_metadata

__all__ = ["RUNS", "build", "logits", "script", "tiny", "with_rules_tables"]

HERE = Path(__file__).parent

#: a run: the config kind, the prompt's tokens, the engine's context
RUNS = {
    "llama3": ("llama3", 200, 256),
    "qwen2-yarn": ("qwen2-yarn", 200, 256),
    "qwen2-yarn-attention-factor": ("qwen2-yarn-attention-factor", 200, 256),
    "phi3-longrope": ("phi3-longrope", 200, 256),
    "phi3-longrope-short": ("phi3-longrope", 40, 256),  # within the original length (64)
    "gemma3": ("gemma3", 200, 256),
    "deepseek-v3-yarn": ("deepseek-v3-yarn", 200, 256),
    "gpt-oss-yarn": ("gpt-oss-yarn", 200, 256),
}


def build(run):
    """The run's model (float32, eval) and its prompt, from a fixed seed."""
    kind, n_tokens, _ = RUNS[run]
    torch.manual_seed(0)
    config = tiny(kind)
    model = T.AutoModelForCausalLM.from_config(config).float().eval()
    return model, torch.randint(3, config.vocab_size, (n_tokens,)).tolist()


def tiny(kind):
    """A tiny random model's config of ``kind``."""
    common = dict(vocab_size=320, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1,
                  max_position_embeddings=256, tie_word_embeddings=False,
                  pad_token_id=0)  # fmt: skip
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
            "rope_theta": 10000.0}  # fmt: skip
    if kind == "llama3":
        return T.LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
            "rope_theta": 10000.0})  # fmt: skip
    if kind == "qwen2-yarn":
        return T.Qwen2Config(**common, rope_parameters=yarn)
    if kind == "qwen2-yarn-attention-factor":
        return T.Qwen2Config(**common, rope_parameters={**yarn, "attention_factor": 1.0})
    if kind == "phi3-longrope":
        return T.Phi3Config(**common, original_max_position_embeddings=64, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + i / 20 for i in range(16)],
            "long_factor": [2.0 + i / 2 for i in range(16)]})  # fmt: skip
    if kind == "gemma3":
        # llama.cpp scales queries by 1/sqrt(head_dim) (Gemma 3 27B aside), drops lm_head
        # (Gemma ties it) and assumes Gemma 3's pattern (5 sliding layers, 1 full): so
        # does the config
        common.update(tie_word_embeddings=True, num_hidden_layers=6)
        return T.Gemma3TextConfig(**common, head_dim=32, query_pre_attn_scalar=32,
            sliding_window=64, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "linear", "factor": 8.0,
                               "rope_theta": 1e6}})  # fmt: skip
    if kind == "gpt-oss-yarn":
        return T.GptOssConfig(**common, head_dim=32, num_local_experts=2,
            num_experts_per_tok=1, sliding_window=64,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={**yarn, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False})  # fmt: skip
    if kind == "deepseek-v3-yarn":
        # dense layers (a random MoE's routing is not the subject); MLA's kv heads = heads
        common.update(num_key_value_heads=4)
        return T.DeepseekV3Config(**common, q_lora_rank=32, kv_lora_rank=32,
            qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4,
            num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=32,
            first_k_dense_replace=2,
            rope_parameters={**yarn, "mscale": 1.0, "mscale_all_dim": 1.0})  # fmt: skip
    raise KeyError(kind)


def script(python, name, request):
    """Run the script ``name`` (beside this file) with ``python`` on ``request``; a failure
    shows its error lines (vLLM's workers print theirs on stdout)."""
    done = subprocess.run([python, str(HERE / name)], input=json.dumps(request), text=True,
                          capture_output=True, check=False)  # fmt: skip
    said = (done.stdout + done.stderr).splitlines()
    errors = [line for line in said if "Error" in line] or said
    assert done.returncode == 0, "\n".join(errors[-8:])


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0]


def with_rules_tables(model, n_ctx, unscaled=False):
    """``model`` with each rotary embedding answering llama.cpp's rules' tables (or, with
    ``unscaled``, theirs without the scaling: plain RoPE of the same base)."""
    found = gguf_metadata(model.config)
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            original = module.forward

            def forward(x, position_ids, layer_type=None, original=original):
                ref_cos, _ = (original(x, position_ids, layer_type) if layer_type
                              else original(x, position_ids))  # fmt: skip
                rope = gguf_rope(found["kv"], found["tensors"], layer_type, n_ctx)
                if unscaled:
                    rope = replace(rope, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0,
                                   freq_factors=None)  # fmt: skip
                cos, sin = rope_cache(rope, position_ids[0])
                if ref_cos.shape[-1] == 2 * cos.shape[-1]:  # halves: each angle twice
                    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
                return cos[None].to(x.dtype), sin[None].to(x.dtype)

            module.forward = forward
    return model
