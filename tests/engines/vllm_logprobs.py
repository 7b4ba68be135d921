"""vLLM's log-probabilities of every prompt token of a model, on the CPU.

Run as a script with the Python of an environment that has vLLM (by
``tests/engines/test_vllm.py``): one JSON request on stdin, ``{"model": folder, "tokens":
[...], "n_ctx": n, "vocab": n, "out": file}``. vLLM loads the folder (a random model
saved by transformers; no tokenizer: the prompt is token ids) in float32 with
``max_model_len = n_ctx``, and the log-probabilities of the whole vocabulary after each
prompt token but the last, ``[tokens - 1, vocab]`` float32, are saved to ``out``.
"""

import json
import os
import sys

import numpy as np


def main():
    request = json.load(sys.stdin)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    vocab = request["vocab"]
    llm = LLM(
        model=request["model"], skip_tokenizer_init=True, dtype="float32",
        max_model_len=request["n_ctx"], max_logprobs=vocab, enforce_eager=True, seed=0,
        gpu_memory_utilization=0.1,  # on the CPU: the share of memory for the KV cache
    )  # fmt: skip
    params = SamplingParams(max_tokens=1, prompt_logprobs=vocab, detokenize=False)
    (out,) = llm.generate([TokensPrompt(prompt_token_ids=request["tokens"])], params)
    rows = out.prompt_logprobs[1:]  # the first token has none
    table = np.full((len(rows), vocab), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        for token, logprob in row.items():
            table[i, token] = logprob.logprob
    np.save(request["out"], table)
    llm.llm_engine.engine_core.shutdown()  # its processes end before this one
    # and this one without its teardown: vLLM 0.32 on the CPU aborts there now and then
    # ("terminate called without an active exception"), the answer written
    os._exit(0)


if __name__ == "__main__":  # vLLM's engine starts processes that import this file
    main()
