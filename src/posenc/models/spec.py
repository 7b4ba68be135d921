"""One layer's positional plan: :class:`LayerSpec`, its encoding and attention pattern.

A :class:`LayerSpec` names the encoding of one layer of a
:class:`~posenc.models.TransformerLM` (rotary, bias or none, by what
:func:`posenc.builder.build` takes) and the pattern around it: a sliding window or a
chunk, attention sinks, a score softcap, Llama 4's query temperature. It checks itself on
creation, naming the field; :class:`~posenc.models.plan.LayerPlan` holds one per layer
and names the layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..attn.checks import check_softcap
from ..attn.masks import AttnPattern
from ..attn.temperature import QueryTemperature
from ..base import Encoding
from ..config import check_bool
from ..registry import get

__all__ = ["EncodingSpec", "LayerSpec", "at_layer", "describe_encoding", "encoding_kind"]

#: what :func:`posenc.builder.build` takes, or None (``"none"``): no encoding (NoPE)
EncodingSpec: TypeAlias = "str | Mapping[str, Any] | Encoding | None"


def encoding_kind(spec: EncodingSpec) -> str:
    """The kind of ``spec`` (``"none"`` for None, ``"none"`` and ``"nope"``), read from the
    registry without building it; raises for a spec :func:`~posenc.builder.build` refuses."""
    if spec is None or spec == "none":
        return "none"
    if isinstance(spec, Encoding):
        return spec.kind
    if isinstance(spec, str):
        return get(spec).kind
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise ValueError(f"an encoding dict needs a 'name' key, got keys {sorted(spec)}")
        return get(spec["name"]).kind
    raise TypeError(
        f"an encoding must be a name, a dict, an Encoding or None, got {type(spec).__name__}"
    )


def describe_encoding(spec: EncodingSpec) -> str:
    """The name of ``spec`` and the configuration it sets apart from the defaults (for an
    instance, from those of its sizes): ``"rope base=1e+06"``, ``"nope"``."""
    if spec is None or spec == "none":
        return "nope"
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Encoding):
        name, given = spec.info.name, spec.config.to_dict()
        required = {k: given[k] for k in type(spec).Config.required_keys()}
        try:
            defaults = type(spec).Config.from_kwargs(**required).to_dict()
        except (TypeError, ValueError):  # no default config for these sizes: show all
            defaults = {}
    else:
        given = {k: v for k, v in spec.items() if k != "name"}
        name = str(spec["name"])
        fields = dataclasses.fields(get(name).Config)
        defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    changed = [
        f"{k}={_value(v)}" for k, v in given.items() if k not in defaults or defaults[k] != v
    ]
    return " ".join([name, *changed])


def _value(v: Any) -> str:
    """A configuration value as the plan's table shows it: numbers with ``g``, a dict (a
    RoPE scaling) as ``type(key=value, ...)`` without its unset (None) entries."""
    if isinstance(v, float):
        return format(v, "g")
    if isinstance(v, dict):
        inner = {k: x for k, x in v.items() if x is not None and k != "rope_type"}
        args = ", ".join(f"{k}={_value(x)}" for k, x in inner.items())
        return f"{v.get('rope_type', '')}({args})"
    return str(v)


@dataclass(frozen=True)
class LayerSpec:
    """The positional plan of one layer.

    Attributes:
        encoding: what :func:`posenc.builder.build` takes (a name, a dict
            ``{"name": ..., **config}`` or an :class:`~posenc.base.Encoding`), rotary,
            bias or none; None or ``"none"``: no encoding (NoPE). Additive encodings act
            once, at the input: give them as ``LayerPlan(input=...)``.
        window: a sliding window of ``window`` keys (``window=`` of
            :func:`posenc.attention`), or None.
        chunk: attention within chunks of ``chunk`` positions (``chunk=``), or None.
        sinks: a learned sink logit per query head (``sinks=``, gpt-oss), initialised to 0.
        softcap: scores capped to ``softcap * tanh(s / softcap)`` (``softcap=``, Gemma 2).
        temperature: Llama 4's query temperature tuning: True for its defaults, or a
            :class:`~posenc.attn.temperature.QueryTemperature`; stored as the record or None.

    Example:
        >>> LayerSpec("rope", window=128).pattern.describe()
        'window 128'
    """

    encoding: EncodingSpec = None
    window: int | None = None
    chunk: int | None = None
    sinks: bool = False
    softcap: float | None = None
    temperature: bool | QueryTemperature | None = None
    #: the pattern of ``window`` and ``chunk``, checked once
    pattern: AttnPattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.encoding == "none":
            set_(self, "encoding", None)
        if isinstance(self.encoding, Mapping):
            set_(self, "encoding", dict(self.encoding))  # the caller's dict may change
        kind = encoding_kind(self.encoding)
        if kind == "additive":
            raise ValueError(
                f"encoding {describe_encoding(self.encoding)!r} is additive: additive "
                "encodings go at the input: LayerPlan(input=...)"
            )
        set_(self, "pattern", AttnPattern(self.window, self.chunk))
        check_bool("sinks", self.sinks)
        set_(self, "softcap", check_softcap(self.softcap))
        temperature = self.temperature
        if temperature is True:
            temperature = QueryTemperature()
        elif temperature is False:
            temperature = None
        elif temperature is not None and not isinstance(temperature, QueryTemperature):
            raise TypeError(
                "temperature must be a bool or a QueryTemperature(floor_scale, attn_scale), "
                f"got {type(temperature).__name__}"
            )
        set_(self, "temperature", temperature)

    @property
    def query_temperature(self) -> QueryTemperature | None:
        """The temperature record, or None."""
        return self.temperature if isinstance(self.temperature, QueryTemperature) else None

    def row(self) -> list[str]:
        """The cells of this layer in :meth:`LayerPlan.__str__`'s table."""
        temperature = self.query_temperature
        return [
            describe_encoding(self.encoding),
            self.pattern.describe(),
            "yes" if self.sinks else "no",
            "-" if self.softcap is None else _value(self.softcap),
            "-" if temperature is None else temperature.describe(),
        ]


def at_layer(where: str, error: Exception) -> Exception:
    """``error`` as a ``TypeError`` or ``ValueError`` whose message starts with ``where``
    (``"layer 3"``), to raise ``from`` it."""
    cls = TypeError if isinstance(error, TypeError) else ValueError
    return cls(f"{where}: {error}")
