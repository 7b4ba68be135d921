"""How each Hugging Face family's layers read as :class:`~posenc.models.spec.LayerSpec`
records, one file per family, from transformers 5.24's modeling code (the attention
module's window, rope and sinks; the mask ``masking_utils`` builds for each layer type).

Each file declares ``FAMILY``, a :class:`~posenc.hf.families.common.Family`: its reader
(``read(keys, layout) -> one spec per layer``, or a ValueError naming the key it cannot
read), whether it is causal and the key of its score scale. :data:`FAMILIES` maps the
family names the model-type records give (:data:`~posenc.hf.records.MODEL_TYPES`) to them,
one per file of this package: a new family is its file here and the records of its model
types.

- :mod:`~posenc.hf.families.common`: what the readers share (layer types, NoPE flags,
  windows, RoPEs per layer type);
- :mod:`~posenc.hf.families.mistral`: Mistral, Mixtral;
- :mod:`~posenc.hf.families.qwen2`: Qwen2, Qwen3;
- :mod:`~posenc.hf.families.gemma2`: Gemma 2;
- :mod:`~posenc.hf.families.gemma3`: Gemma 3 (its text model);
- :mod:`~posenc.hf.families.cohere2`: Cohere2;
- :mod:`~posenc.hf.families.afmoe`: AFMoE (read as Cohere2);
- :mod:`~posenc.hf.families.gpt_oss`: gpt-oss;
- :mod:`~posenc.hf.families.llama4`: Llama 4 (its text model);
- :mod:`~posenc.hf.families.smollm3`: SmolLM3;
- :mod:`~posenc.hf.families.modernbert`: ModernBERT;
- :mod:`~posenc.hf.families.sliding_full`: OLMo 3, Ministral, CWM, Mellum, Laguna;
- :mod:`~posenc.hf.families.exaone4`: EXAONE 4, EXAONE-MoE, Kolibri.
"""

from __future__ import annotations

import importlib
import pkgutil

from .common import Family

__all__ = ["FAMILIES", "Family"]


def _families() -> dict[str, Family]:
    """Every module of this package but :mod:`.common`, by name, as its ``FAMILY``."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if m.name != "common"]
    return {name: importlib.import_module(f"{__name__}.{name}").FAMILY for name in sorted(names)}


#: family name -> its reader, as the model-type records name it (every file here)
FAMILIES: dict[str, Family] = _families()
