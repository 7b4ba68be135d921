"""Another posenc encoding in place of a loaded transformers model's RoPE, layer by layer:
``apply(model, encoding=...)``.

A transformers attention layer takes its rotary tables as ``position_embeddings`` (computed
once per forward by the model's rotary embedding) and rotates q and k with them. :func:`swap`
adds a forward pre-hook to one layer that replaces those tables before the layer reads them:

- NoPE (``"none"`` kind) and a bias encoding: the identity, cos 1 and sin 0, so q and k pass
  unrotated, bit-exact (``q·1 + rotate(q)·0 = q``); a bias encoding is then added to the
  scores by posenc's attention backend (:mod:`posenc.hf.backend`);
- RoPE or p-RoPE with other settings (a base, a fraction of frequencies kept): their tables
  of the layer's ``position_ids``, in the form the model's own embedding gives
  (:data:`~posenc.hf.exact_rotary.FORMATS`, found by :func:`model_table`) and its dtype:
  the encoding's ``k``-th frequency turns the model's ``k``-th pair of channels, so p-RoPE
  keeps the model's pairs and stops turning those of its lowest frequencies.

Kinds that change more than the tables (additive encodings, which add to the residual
stream; xPos, M-RoPE, PoPE, FoPE, 3D RoPE) are refused by name.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple, cast

import torch
from torch import nn

from ..base import Encoding
from ..builder import build
from ..rotary import RoPE
from ..rotary.p_rope import PRoPE
from .exact_rotary import ExactRotaryEmbedding, widen

__all__ = ["ModelTable", "layer_encoding", "model_table", "swap"]

#: the rotary encodings whose rotation is a table of the model's form
TABLE_ROTARY = (RoPE, PRoPE)


class ModelTable(NamedTuple):
    """The form of a model's rotary tables and the RoPE posenc reads from its config."""

    form: str
    rope: RoPE


def layer_encoding(module: Any, spec: Any) -> Encoding:
    """``spec`` built for the heads of the attention layer ``module`` (a new encoding per
    layer for a name or a dict; an instance is shared), refused by name unless it can take
    RoPE's place there."""
    config = module.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    encoding = build(spec, dim=config.hidden_size, head_dim=head_dim, n_heads=heads)
    table = encoding.kind == "rotary" and type(encoding) in TABLE_ROTARY
    if encoding.kind not in ("none", "bias") and not table:
        raise ValueError(
            "encoding must be 'none' (NoPE), a bias encoding, or RoPE or p-RoPE of other "
            f"settings in place of RoPE, got {encoding.info.name!r} ({encoding.kind})"
        )
    if "position_embeddings" not in inspect.signature(module.forward).parameters:
        raise ValueError(
            f"{type(module).__name__} takes no position_embeddings: its RoPE cannot be swapped"
        )
    return encoding


def model_table(model: Any) -> ModelTable:
    """The form and RoPE of ``model``'s own rotary tables: those of its text model's first
    rotary embedding, fitted here unless :func:`posenc.hf.apply` made it exact already."""
    text = model.config.get_text_config()
    for name, module in model.named_modules():
        if type(module).__name__.endswith("RotaryEmbedding") and name:
            exact = module
            if not isinstance(module, ExactRotaryEmbedding):
                exact = ExactRotaryEmbedding.fit(module, getattr(module, "config", text))
            forms = set(exact.forms.values())
            if len(forms) != 1:
                raise ValueError(f"the model's rotary tables come in several forms: {forms}")
            return ModelTable(forms.pop(), cast(RoPE, exact.ropes[0]))
    raise ValueError(f"{type(model).__name__} has no rotary embedding to swap")


def swap(module: nn.Module, encoding: Encoding, table: ModelTable | None) -> Any:
    """A forward pre-hook on the attention layer ``module`` that gives it ``encoding``'s
    tables (the identity for NoPE and bias encodings); its handle."""
    if encoding.kind != "rotary":
        return module.register_forward_pre_hook(_no_rotation, with_kwargs=True)
    assert table is not None, "a rotary swap needs the model's table form"
    probe = torch.zeros(1, 1, dtype=torch.long)
    pairs = cast(RoPE, encoding).rotation(probe)[0].shape[-1]
    own = table.rope.rotation(probe)[0].shape[-1]
    if pairs != own:
        raise ValueError(
            f"encoding {encoding.info.name!r} turns {pairs} pairs of channels and the model's "
            f"RoPE {own}: give it the model's head_dim and partial_rotary_factor"
        )
    return module.register_forward_pre_hook(_Tables(encoding, table.form), with_kwargs=True)


def _no_rotation(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The layer's rotary tables turned into the identity (cos 1, sin 0)."""
    cos, sin = _tables_of(module, kwargs)
    kwargs["position_embeddings"] = (cos.new_ones(cos.shape), sin.new_zeros(sin.shape))
    return args, kwargs


class _Tables:
    """A forward pre-hook: the layer's rotary tables replaced by ``encoding``'s of its
    ``position_ids``, in the model's form and dtype."""

    def __init__(self, encoding: Encoding, form: str) -> None:
        self.encoding, self.form = encoding, form

    def __call__(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        cos, _ = _tables_of(module, kwargs)
        positions = kwargs.get("position_ids")
        if positions is None:
            raise ValueError(
                f"{type(module).__name__} was called without position_ids: a swapped RoPE "
                "needs them (pass position_ids to the model)"
            )
        rope = cast(RoPE, self.encoding)
        new_cos, new_sin = rope.rotation(positions)[:2]
        kwargs["position_embeddings"] = tuple(
            t.to(cos.dtype) for t in widen(new_cos, new_sin, self.form)
        )
        return args, kwargs


def _tables_of(module: nn.Module, kwargs: dict[str, Any]) -> Any:
    tables = kwargs.get("position_embeddings")
    if tables is None:
        raise ValueError(
            f"{type(module).__name__} was called without position_embeddings as a keyword: "
            "its RoPE cannot be swapped"
        )
    return tables
