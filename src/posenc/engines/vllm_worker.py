"""vLLM's rotation of a Hugging Face config, in vLLM's own environment.

Run by :func:`posenc.engines.vllm_engine.vllm_tables` as a script with the Python of an
environment that has vLLM (``POSENC_VLLM_PYTHON``; ``make test-engines`` builds one): it
imports nothing of posenc, reads one JSON request on stdin and writes one JSON answer on
stdout. The request: ``config`` (a folder with a ``config.json``) and ``jobs``, each with
a ``layer_type`` (or null), ``head_size``, ``is_neox_style`` and ``positions``. The
rotation is vLLM's ``get_rope`` called the way vLLM's Llama-family model files call it
(the language model's ``rope_parameters``, of its layer type, ``max_position_embeddings``,
``dual_chunk_attention_config``; DeepSeek-V2/V3's YaRN as ``deepseek_yarn``; the head
size and pair layout as posenc reads them), and its
``forward_native`` turns keys that are ``(1, 0)`` in every pair: what comes out is
``(cos, sin)`` of each pair, the attention factor included. ``max_model_len`` is set to
``max_position_embeddings``, the whole context, as one serving it passes
``--max-model-len`` (vLLM 0.32's own default, ``_get_and_verify_max_len``, is 4096 for
Phi-3.5-mini and Phi-4-mini, their original length; it does not multiply by YaRN's
factor): LongRoPE chooses its factors by it, and vLLM serves no position past it, so
those are left out (the answer says which positions ran).
The answer: one ``{"class": ..., "positions": [...], "cos": [[...]], "sin": [[...]]}``
per job, one row per position run, or ``{"error": ...}`` for a job vLLM cannot run here
(its dual-chunk rotary embedding wants a CUDA device).
"""

import json
import sys
import types


def _language(config):
    return getattr(config, "text_config", None) or config


def rotation(config, request):
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config  # type: ignore[import-not-found]
    from vllm.model_executor.layers.rotary_embedding import (  # type: ignore[import-not-found]
        get_rope,
    )

    params = dict(getattr(config, "rope_parameters", None) or {})
    if request["layer_type"] is not None:
        params = dict(params[request["layer_type"]])
    if config.model_type in ("deepseek_v2", "deepseek_v3") and params.get("rope_type") == "yarn":
        params["rope_type"] = "deepseek_yarn"  # as vLLM's deepseek_v2.py renames it
    head = request["head_size"]
    engine = VllmConfig()
    # max_model_len: the whole context, max_position_embeddings (as --max-model-len sets
    # it); LongRoPE picks its short or long factors by it, once, when it is built
    limit = types.SimpleNamespace(max_model_len=config.max_position_embeddings)
    object.__setattr__(engine, "model_config", limit)
    with set_current_vllm_config(engine):
        rope = get_rope(
            head,
            config.max_position_embeddings,
            request["is_neox_style"],
            rope_parameters=params,
            dual_chunk_attention_config=getattr(config, "dual_chunk_attention_config", None),
        )
        positions = torch.tensor(request["positions"], dtype=torch.long)
        positions = positions[positions < limit.max_model_len]  # vLLM serves none past it
        pairs = rope.rotary_dim // 2
        key = torch.zeros(len(positions), head)  # [tokens, heads · head_size]
        first = slice(0, pairs) if request["is_neox_style"] else slice(0, 2 * pairs, 2)
        key[:, first] = 1.0
        run = getattr(rope, "forward_native", None) or rope.forward
        try:
            _, turned = run(positions, key.clone(), key.clone())
        except RuntimeError:
            turned = None
        if turned is None or turned.numel() != key.numel():  # DeepSeek's: [tokens, 1, head]
            _, turned = run(positions, key[:, None].clone(), key[:, None].clone())
        turned = turned.reshape(len(positions), head).double()
        if request["is_neox_style"]:
            cos, sin = turned[:, :pairs], turned[:, pairs : 2 * pairs]
        else:
            cos, sin = turned[:, 0 : 2 * pairs : 2], turned[:, 1 : 2 * pairs : 2]
    return {
        "class": type(rope).__name__,
        "positions": positions.tolist(),
        "cos": cos.tolist(),
        "sin": sin.tolist(),
    }


def answer(request):
    import transformers

    config = _language(transformers.AutoConfig.from_pretrained(request["config"]))
    answers = []
    for job in request["jobs"]:
        try:
            answers.append(rotation(config, job))
        except (RuntimeError, ValueError, KeyError, IndexError, NotImplementedError) as error:
            answers.append({"error": f"{type(error).__name__}: {error}"})
    return answers


if __name__ == "__main__":
    json.dump(answer(json.load(sys.stdin)), sys.stdout)
