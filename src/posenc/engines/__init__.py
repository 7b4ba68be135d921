"""The same rotation in every engine: posenc's reading of a model's config against the
rotation an inference or training engine applies (:func:`conform`,
``posenc conform``).

- :mod:`~posenc.engines.compare`: the probe positions, posenc's float64 tables, the
  float32 tolerance and what a disagreement is on;
- :mod:`~posenc.engines.hf_engine`: transformers' rotary embedding of a config;
- :mod:`~posenc.engines.vllm_engine`: vLLM's, run by :mod:`~posenc.engines.vllm_worker`
  in vLLM's own environment;
- :mod:`~posenc.engines.llama_engine`: llama.cpp's: the GGUF metadata its converter
  writes (:mod:`~posenc.engines.gguf_worker`), by its rules
  (:mod:`~posenc.engines.gguf_rope`);
- :mod:`~posenc.engines.worker`: running an engine's worker script;
- :mod:`~posenc.engines.conform`: every layer type against every engine, and the table.
"""

from .conform import ENGINES, ConformRow, conform, render_rows

__all__ = ["ENGINES", "ConformRow", "conform", "render_rows"]
