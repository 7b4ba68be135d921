"""The pair layout of each Hugging Face model type's RoPE, read from transformers' code.

A RoPE rotates pairs of channels, and which pairs is a fact of the model's code, not of its
config: ``"half"`` pairs ``(i, i + d/2)`` (GPT-NeoX, Llama), ``"interleaved"`` pairs
``(2i, 2i + 1)`` (GPT-J, Cohere, GLM). A wrong layout gives a model that runs and whose
attention is wrong, so posenc never guesses: a model type whose layout it has not read is
an error that names it and asks for ``layout=``. The layouts are the records of
:mod:`posenc.hf.records` (``ModelType.layout``).

Each entry was read by rotating a basis vector with the family's own rotary embedding and
``apply_rotary_pos_emb`` (transformers 5.24) and seeing which coordinate it mixes with, and
in which direction; ``tests/hf/test_layouts.py`` reads them again from the transformers
installed (gpt-oss's half-width tables and Llama 4's complex ones:
``tests/hf/test_layer_plan.py``). Multi-head latent attention (DeepSeek-V2/V3 and the
models built on it) rotates a ``qk_rope_head_dim`` slice picked by ``rope_interleave``
(DeepSeek-V2's code always interleaves).
"""

from __future__ import annotations

from typing import Any

from ..config import check_bool
from . import records

__all__ = ["pair_layout"]


def pair_layout(model_type: Any, rope_interleave: Any = None, given: str | None = None) -> str:
    """``"half"`` or ``"interleaved"``: the pairs ``model_type``'s code rotates.

    Args:
        model_type: the config's ``model_type``.
        rope_interleave: the config's ``rope_interleave`` (multi-head latent attention
            only; None: transformers' default, True).
        given: the layout the caller read from the model's code, for a model type posenc
            has not read; for a known one it must agree.

    Raises:
        ValueError: for a model type posenc refuses, for one it has not read without
            ``given``, and for a ``given`` that is not a layout or contradicts the model
            type's, naming them.

    Example:
        >>> pair_layout("llama"), pair_layout("cohere"), pair_layout("deepseek_v3", False)
        ('half', 'interleaved', 'half')
        >>> pair_layout("my_model", given="interleaved")
        'interleaved'
    """
    if given is not None and given not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {given!r}")
    records.check_not_refused(model_type)
    record = records.model_type(model_type)
    known = None if record is None else record.layout
    if known == "by_flag":  # multi-head latent attention: its code reads the flag
        if rope_interleave is not None:
            check_bool("rope_interleave", rope_interleave)
        known = "half" if rope_interleave is False else "interleaved"
    if known is not None and given not in (None, known):
        raise ValueError(
            f"layout={given!r} contradicts model_type {model_type!r}, whose code rotates "
            f"{known!r} pairs"
        )
    layout = known if known is not None else given
    if layout is not None:
        return layout
    named = "a config without model_type" if model_type is None else f"model_type {model_type!r}"
    raise ValueError(
        f"posenc has not read the rotary pair layout of {named} from "
        "transformers' code, and a wrong one rotates the wrong channels without an error: "
        "pass layout='half' (pairs i, i + d/2: GPT-NeoX, Llama) or layout='interleaved' "
        "(pairs 2i, 2i + 1: GPT-J) as the model's apply_rotary_pos_emb does"
    )


#: the tables this module held before the records (:mod:`posenc.hf.records`), by name: each
#: computed from the records when read, for code that imports it from here
_OLD_TABLES = {
    "HALF": lambda: frozenset(records.model_types(layout="half")),
    "INTERLEAVED": lambda: frozenset(records.model_types(layout="interleaved")),
    "MLA_BY_FLAG": lambda: frozenset(records.model_types(layout="by_flag")),
    "LATENT_ATTENTION": lambda: frozenset(records.model_types(latent=True)),
    "REFUSED": lambda: {n: r.refused for n, r in records.MODEL_TYPES.items() if r.refused},
}


def __getattr__(name: str) -> Any:
    if name in _OLD_TABLES:
        return _OLD_TABLES[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
