"""llama.cpp's logits of a GGUF model, through llama-cpp-python.

Run as a script with the Python of an environment that has ``llama_cpp`` (by
``tests/engines/test_llama_cpp.py``): one JSON request on stdin, ``{"gguf": file,
"tokens": [...], "n_ctx": n, "out": file}``; the logits of every position, ``[tokens,
vocab]`` float32, are saved to ``out`` with numpy.
"""

import json
import sys

import numpy as np
from llama_cpp import Llama


def main():
    request = json.load(sys.stdin)
    tokens = request["tokens"]
    llm = Llama(
        model_path=request["gguf"],
        n_ctx=request["n_ctx"],
        n_batch=len(tokens),
        n_ubatch=len(tokens),
        logits_all=True,
        n_threads=2,
        verbose=False,
        type_k=0,
        type_v=0,
    )
    llm.eval(tokens)
    np.save(request["out"], np.asarray(llm.scores[: len(tokens)], dtype=np.float32))


if __name__ == "__main__":
    main()
