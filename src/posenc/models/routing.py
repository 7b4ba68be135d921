"""Which encoding each layer of a :class:`~posenc.models.TransformerLM` uses: the plan
resolved from the model's arguments, and its encodings built once each.

:func:`resolve_plan` turns ``encoding=`` (the same encoding everywhere) or ``plan=`` into a
:class:`~posenc.models.plan.LayerPlan`. :func:`build_routing` builds the plan's encodings
for the model's sizes, once per distinct spec: layers whose specs are equal (or build to the
same class and configuration) share one instance, as T5 shares its relative bias, so one
forward computes one rotation or bias table for all of them. An encoding that reads the
layer's input (:class:`~posenc.base.ReadsInput`: FoX's forget gates, PaTH's transforms) is
built once per layer that names it, as the papers' gates and transforms are per layer (an
instance given in several layers stays shared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..base import Encoding, ReadsInput
from ..builder import build
from .plan import LayerPlan
from .spec import EncodingSpec, LayerSpec, at_layer, describe_encoding

__all__ = ["Routing", "build_routing", "resolve_plan"]


def resolve_plan(
    encoding: EncodingSpec,
    plan: LayerPlan | Sequence[LayerSpec] | None,
    n_layers: int,
) -> LayerPlan:
    """The plan of a model of ``n_layers`` given ``encoding=`` or ``plan=`` (exactly one):
    ``LayerPlan.uniform(n_layers, encoding)``, or ``plan`` (a list of specs made a plan)."""
    if encoding is not None and plan is not None:
        raise TypeError(
            "pass encoding= (the same encoding in every layer) or plan= (one LayerSpec per "
            "layer), not both"
        )
    if plan is None:
        if encoding is None:
            raise TypeError(
                "pass encoding= (a name, dict or Encoding; 'nope' for none) or plan= (a "
                "LayerPlan, or a list of LayerSpec)"
            )
        return LayerPlan.uniform(n_layers, encoding)
    if not isinstance(plan, LayerPlan):
        plan = LayerPlan(plan)
    if len(plan) != n_layers:
        raise ValueError(f"plan has {len(plan)} layers but n_layers is {n_layers}")
    return plan


@dataclass(frozen=True)
class Routing:
    """The encodings of a plan, built, and who uses which.

    Attributes:
        encodings: every distinct encoding, the model's :attr:`encoding
            <posenc.models.TransformerLM.encoding>` first (the input's if the plan has
            one, else the first layer's that is not NoPE, else NoPE).
        layers: the index in ``encodings`` of each layer's encoding.
        input: the index of the input's additive encoding, or None.
    """

    encodings: tuple[Encoding, ...]
    layers: tuple[int, ...]
    input: int | None


def build_routing(plan: LayerPlan, **sizes: int) -> Routing:
    """Build the encodings of ``plan`` with the model's ``sizes`` (``dim``, ``head_dim``,
    ``n_heads``; see :func:`posenc.builder.build`), in the order of the plan (the input
    first), once per distinct spec; errors name the layer."""
    where = ["input"] if plan.input is not None else []
    wanted: list[EncodingSpec] = [plan.input] if plan.input is not None else []
    where += [f"layer {i}" for i in range(len(plan))]
    wanted += [layer.encoding for layer in plan]
    built = _Built([], [], [])
    index = [
        built.find_or_build(spec, name, sizes) for spec, name in zip(wanted, where, strict=True)
    ]
    first = 0 if plan.input is not None else _first_encoded(built.encodings, index)
    order = [first, *(j for j in range(len(built.encodings)) if j != first)]  # model's first
    moved = {old: new for new, old in enumerate(order)}
    index = [moved[j] for j in index]
    input_index = index.pop(0) if plan.input is not None else None
    return Routing(tuple(built.encodings[j] for j in order), tuple(index), input_index)


@dataclass
class _Built:
    """The encodings built so far, the specs already seen (with the index of their
    encoding), and whether each encoding was given as an instance (never shared with
    another spec)."""

    encodings: list[Encoding]
    seen: list[tuple[Any, int]]
    given: list[bool]

    def find_or_build(self, spec: EncodingSpec, where: str, sizes: dict[str, int]) -> int:
        """The index of the encoding of ``spec``: one already built from an equal spec or
        to an equal class and configuration, else a new one."""
        spec = "nope" if spec is None else spec
        instance = isinstance(spec, Encoding)
        for known, j in self.seen:
            if known is spec and instance:
                return j  # the same instance, as given
            own = isinstance(self.encodings[j], ReadsInput)  # one per layer (FoX, PaTH)
            if not instance and not own and not self.given[j] and _equal(known, spec):
                return j
        try:
            enc = build(spec, **sizes)
        except (TypeError, ValueError) as e:
            raise at_layer(f"{where}: encoding {describe_encoding(spec)!r}", e) from e
        if enc.position_axes != 1:
            raise ValueError(
                f"{where}: encoding {enc.info.name!r} takes image-grid positions ([seq, "
                f"{enc.position_axes}]); TransformerLM is a model of token sequences: use a "
                "1-D encoding (posenc.available() lists them)"
            )
        j = len(self.encodings)
        if not instance and not isinstance(enc, ReadsInput):
            j = next(
                (
                    i
                    for i, other in enumerate(self.encodings)
                    if not self.given[i]
                    and type(other) is type(enc)
                    and _equal(other.config, enc.config)
                ),
                j,
            )
        if j == len(self.encodings):
            self.encodings.append(enc)
            self.given.append(instance)
        self.seen.append((spec, j))
        return j


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` as a bool, False where comparing fails (a tensor in a config)."""
    try:
        return bool(a == b)
    except (TypeError, RuntimeError, ValueError):
        return False


def _first_encoded(built: list[Encoding], index: list[int]) -> int:
    """The first layer's encoding that is not NoPE (the first layer's if all are)."""
    return next((j for j in index if built[j].kind != "none"), index[0])
