"""posenc inside a loaded transformers model, in one call: :func:`apply`, and :func:`undo`.

The ecosystem's convention for running other code inside a loaded model is Liger-Kernel's
(``apply_liger_kernel_to_llama(model)`` patches it in place) and transformers' own
(``AttentionInterface`` and ``attn_implementation=``). :func:`apply` follows both:

- ``rotary="exact"`` replaces each rotary embedding of the model by
  :class:`~posenc.hf.exact_rotary.ExactRotaryEmbedding` (float64 angles, checked against the
  module it replaces);
- ``kernel="triton"`` rotates q and k with posenc's Triton kernel
  (:mod:`posenc.hf.triton_rotation`) where it runs;
- ``attention="posenc"`` runs the model's attention through :func:`posenc.attention`
  (:mod:`posenc.hf.backend`);
- ``encoding=`` swaps RoPE for another posenc encoding in every layer or in ``layers``
  (``"nope"``, or a bias encoding: ALiBi, FIRE, KERPLE, T5, ...), with the new parameters
  trainable, for research on pretrained models.

:func:`undo` puts the model's own modules back (the same objects: bit-exact) and its
attention implementation. The model's config is not changed: a patched model saves a config
transformers loads without posenc.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..base import Encoding
from ..functional.rope_triton_checks import runs_on
from ..functional.rope_triton_launch import triton_available
from .backend import ENCODING, NAME, register
from .exact_rotary import ExactRotaryEmbedding
from .swap import layer_encoding, model_table, swap
from .triton_rotation import patch, unpatch

__all__ = ["KERNELS", "ROTARY", "apply", "undo"]

#: the rotary choices of :func:`apply`
ROTARY = ("exact", None)
#: the kernel choices of :func:`apply`
KERNELS = ("auto", "triton")
#: the attribute a patched model keeps what :func:`undo` needs in
_STATE = "_posenc_applied"


@dataclass
class _Applied:
    """What :func:`apply` changed in a model, for :func:`undo`."""

    rotary: list[tuple[nn.Module, str, nn.Module]] = field(default_factory=list)
    hooks: list[Any] = field(default_factory=list)
    kernel: list[str] = field(default_factory=list)
    encoded: list[nn.Module] = field(default_factory=list)
    attention: str | None = None


def apply(
    model: Any,
    *,
    rotary: str | None = "exact",
    kernel: str = "auto",
    attention: str | None = None,
    encoding: str | dict[str, Any] | Encoding | None = None,
    layers: Iterable[int] | Callable[[int], bool] | None = None,
) -> Any:
    """Run posenc inside ``model`` (a loaded transformers model), in place.

    Args:
        model: a transformers model (``LlamaForCausalLM``, ``Gemma3ForConditionalGeneration``,
            ...), not patched already (:func:`undo` first).
        rotary: ``"exact"``: its rotary embeddings computed by posenc (float64 angles, the
            same scaling), each checked against the module it replaces on its first
            positions; None: kept.
        kernel: ``"triton"``: q and k rotated in one launch of posenc's Triton kernel on
            CUDA (or the CPU under ``TRITON_INTERPRET=1``), for every model of the same type
            in the process until the last one is undone (as Liger-Kernel patches);
            ``"auto"``: the model's own rotation.
        attention: ``"posenc"``: the model's attention runs :func:`posenc.attention`
            (``attn_implementation="posenc"``, :mod:`posenc.hf.backend`); None: kept, unless
            ``encoding`` is a bias encoding, which needs it.
        encoding: another posenc encoding in place of RoPE in ``layers`` (a name, a dict
            with ``"name"``, or an instance, shared by the layers; built for the model's
            heads, :mod:`posenc.hf.swap`): ``"nope"`` (no rotation), a bias encoding
            (``"alibi"``, ``"fire"``, ``"kerple"``, ``"t5"``, ...; one per layer, its
            parameters trainable), or RoPE or p-RoPE of other settings (``{"name":
            "p_rope", "p": 0.75}``, in the model's pair layout). None: RoPE stays.
        layers: the layers ``encoding`` replaces RoPE in: indices, or a predicate of the
            index (``lambda i: i % 4 == 3``: NoPE every 4th layer); None: every layer.

    Returns:
        ``model``, patched.

    Raises:
        ValueError: a bad argument, a model patched already, a rotary embedding posenc does
            not reproduce, an attention layer that takes no ``position_embeddings``, an
            encoding that cannot take RoPE's place (each named).

    Example:
        >>> apply(model, rotary="exact")  # doctest: +SKIP
        >>> apply(model, encoding="alibi", layers=range(0, 32, 2))  # doctest: +SKIP
    """
    _check_arguments(model, rotary, kernel, attention, encoding, layers)
    state = _Applied()
    try:
        if rotary == "exact":
            state.rotary = _exact_rotary(model)
        if kernel == "triton":
            state.kernel = _triton_kernel(model)
        chosen = _attention_layers(model, layers) if encoding is not None else []
        table = None
        for module in chosen:
            new = layer_encoding(module, encoding)
            if new.kind == "rotary" and table is None:
                table = model_table(model)
            state.hooks.append(swap(module, new, table))
            if new.kind == "bias":
                setattr(module, ENCODING, new.to(next(module.parameters()).device))
                state.encoded.append(module)
                attention = NAME
        if attention == NAME:
            state.attention = model.config._attn_implementation
            model.set_attn_implementation(register())
    except Exception:
        _restore(model, state)
        raise
    setattr(model, _STATE, state)
    return model


def undo(model: Any) -> Any:
    """Put back what :func:`apply` changed in ``model``: its own rotary modules (the same
    objects), no posenc encodings or hooks, its attention implementation.

    Raises:
        ValueError: the model is not patched.
    """
    _check_model(model)
    if getattr(model, _STATE, None) is None:
        raise ValueError("model is not patched by posenc.hf.apply")
    _restore(model, getattr(model, _STATE))
    delattr(model, _STATE)
    return model


def _check_arguments(
    model: Any, rotary: Any, kernel: Any, attention: Any, encoding: Any, layers: Any
) -> None:
    """Raise, naming the argument, unless :func:`apply` can take these."""
    _check_model(model)
    _check_choice("rotary", rotary, ROTARY)
    _check_choice("kernel", kernel, KERNELS)
    _check_choice("attention", attention, (NAME, None))
    if encoding is not None and not isinstance(encoding, (str, dict, Encoding)):
        raise TypeError(
            "encoding must be a name, a dict with 'name', an Encoding or None, got "
            f"{type(encoding).__name__}"
        )
    if layers is not None and encoding is None:
        raise ValueError("layers choose where encoding replaces RoPE: give encoding too")
    if getattr(model, _STATE, None) is not None:
        raise ValueError("model is patched already: posenc.hf.undo(model) first")


def _check_model(model: Any) -> None:
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a transformers model (an nn.Module with a config), got "
            f"{type(model).__name__}"
        )


def _check_choice(name: str, value: Any, choices: tuple[str | None, ...]) -> None:
    if not (value is None or isinstance(value, str)) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _restore(model: Any, state: _Applied) -> None:
    for parent, name, original in reversed(state.rotary):
        setattr(parent, name, original)
    unpatch(state.kernel)
    for handle in state.hooks:
        handle.remove()
    for module in state.encoded:
        delattr(module, ENCODING)
    if state.attention is not None:
        model.set_attn_implementation(state.attention)


def _exact_rotary(model: Any) -> list[tuple[nn.Module, str, nn.Module]]:
    """Every rotary embedding of ``model``'s language model (of its text config, not a
    vision tower's) replaced by its exact one: ``(parent, name, original)`` of each."""
    replaced = []
    text = model.config.get_text_config()
    found = [
        (name, module)
        for name, module in model.named_modules()
        if name
        and type(module).__name__.endswith("RotaryEmbedding")
        and getattr(module, "config", text) in (text, model.config)
    ]
    if not found:
        raise ValueError(f"{type(model).__name__} has no rotary embedding module to make exact")
    for name, module in found:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        config = getattr(module, "config", text)
        exact = ExactRotaryEmbedding.fit(module, config)
        setattr(parent, attr, exact)
        replaced.append((parent, attr, module))
    return replaced


def _triton_kernel(model: Any) -> list[str]:
    """The rotation of ``model``'s attention classes by the Triton kernel
    (:func:`~posenc.hf.triton_rotation.patch`), refused where it cannot run."""
    device = next(model.parameters()).device
    if not triton_available() or not runs_on(device):
        raise ValueError(
            "kernel='triton' needs Triton and CUDA tensors (or the CPU under "
            f"TRITON_INTERPRET=1), and the model is on {device}: kernel='auto' here"
        )
    layers = _attention_layers(model, None)
    return patch({type(module) for module in layers})


def _attention_layers(
    model: Any, layers: Iterable[int] | Callable[[int], bool] | None
) -> list[nn.Module]:
    """The attention modules of the layers chosen (by their ``layer_idx``)."""
    found: dict[int, nn.Module] = {
        module.layer_idx: module
        for module in model.modules()
        if type(module).__name__.endswith("Attention")
        and isinstance(getattr(module, "layer_idx", None), int)
    }
    if not found:
        raise ValueError(f"{type(model).__name__} has no attention modules with a layer_idx")
    if layers is None:
        return [found[i] for i in sorted(found)]
    if callable(layers):
        return [found[i] for i in sorted(found) if layers(i)]
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(
            f"layers must be layer indices, a predicate of the index or None, got "
            f"{type(layers).__name__}"
        )
    chosen = list(layers)
    unknown = [i for i in chosen if type(i) is not int or i not in found]
    if unknown:
        raise ValueError(f"layers must be indices in 0..{max(found)}, got {unknown}")
    return [found[i] for i in chosen]
