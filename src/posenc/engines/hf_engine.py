"""transformers' rotation of a config: the model type's own rotary embedding class, called
as its model calls it, read back as ``(cos, sin)`` per rotary pair.

The class is the ``*RotaryEmbedding`` of the model type's modeling module (the text one of
a multimodal model); its tables are ``cat(freqs, freqs)`` (pairs ``(i, i + n)``) or
repeated per pair (``(2i, 2i + 1)``), which :func:`pair_tables` tells apart by their
values. A model whose class cannot be built from the config alone, or whose tables are
neither, is named in the error.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch

from ..hf.mrope import language_config

__all__ = ["pair_tables", "rotary_class", "transformers_tables"]


def rotary_class(config: Any) -> type:
    """The rotary embedding class transformers builds for ``config``'s language model."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    model_type = config.model_type
    package = model_type_to_module_name(model_type)  # gemma3_text -> gemma3
    try:
        module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    except ImportError as err:
        raise ValueError(
            f"transformers has no modeling module for model_type {model_type!r}"
        ) from err
    found = [
        obj for name, obj in vars(module).items()
        if isinstance(obj, type) and name.endswith("RotaryEmbedding")
        and obj.__module__ == module.__name__
        and not any(part in name for part in ("Vision", "Audio", "Talker"))
    ]  # fmt: skip
    if len(found) > 1:  # a multimodal model's text one
        found = [c for c in found if "Text" in c.__name__] or found
    if len(found) != 1:
        names = sorted(c.__name__ for c in found)
        raise ValueError(f"model_type {model_type!r}: no single rotary embedding class ({names})")
    return found[0]


def pair_tables(
    cos: torch.Tensor, sin: torch.Tensor, pairs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One value per rotary pair from a transformers table: as it is where it has one per
    pair (DeepSeek-V4), else the first half where the halves repeat (``cat(freqs,
    freqs)``), every other one where neighbours repeat (``repeat_interleave``). Exact: the
    repeated values are equal.

    Shapes:
        ``[..., pairs]`` or ``[..., 2·pairs]`` each -> ``[..., pairs]``.
    """
    if cos.shape[-1] == pairs:
        return cos, sin
    n = cos.shape[-1] // 2
    if torch.equal(cos[..., :n], cos[..., n:]) and torch.equal(sin[..., :n], sin[..., n:]):
        return cos[..., :n], sin[..., :n]
    if torch.equal(cos[..., ::2], cos[..., 1::2]) and torch.equal(sin[..., ::2], sin[..., 1::2]):
        return cos[..., ::2], sin[..., ::2]
    raise ValueError("transformers' tables repeat neither by halves nor by neighbours")


def transformers_tables(
    config: Any, positions: torch.Tensor, layer_type: str | None, pairs: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], str]:
    """transformers' ``(cos, sin)`` for each of ``pairs`` rotary pairs at ``positions`` (one
    call, as a sequence of those positions: its dynamic scalings read the largest), and
    what it ran.

    Shapes:
        positions ``[n]`` -> cos, sin ``[n, pairs]`` (float32, as transformers computes).
    """
    language = language_config(config)
    cls = rotary_class(config)
    emb = cls(language)
    call = inspect.signature(emb.forward).parameters
    kwargs = {"layer_type": layer_type} if layer_type is not None and "layer_type" in call else {}
    x = torch.zeros(1, positions.numel(), 1)
    ids = positions.unsqueeze(0)
    with torch.no_grad():
        try:
            out = emb(x, ids, **kwargs)
        except (RuntimeError, ValueError, IndexError):  # M-RoPE: one row of ids per axis
            out = emb(x, ids.expand(3, 1, -1), **kwargs)
    if isinstance(out, torch.Tensor) and out.is_complex():  # Llama 4: e^(iθ) per pair
        cos, sin = out.real, out.imag
    else:
        cos, sin = out
    cos, sin = (t.reshape(-1, positions.numel(), t.shape[-1])[0] for t in (cos, sin))
    return pair_tables(cos, sin, pairs), cls.__name__
