"""Layer plans: the positional plan of every layer of a :class:`~posenc.models.TransformerLM`.

Modern models give each layer its own encoding and attention pattern: Llama 4 and SmolLM3
drop RoPE from every fourth layer (NoPE; Llama 4 also chunks the others' attention and
tunes the NoPE layers' query temperature), Gemma 2/3 and Cohere2 alternate sliding-window
layers with global ones (Gemma 3 with two RoPE bases, Cohere2 with NoPE globals), gpt-oss
alternates banded and dense layers with attention sinks. :class:`~posenc.models.spec.LayerSpec` is
one layer's plan, :class:`LayerPlan` the model's: one spec per layer, plus an optional additive
encoding at the input, with short constructors for those patterns. A plan checks itself
on creation (the layer and the field are named) and prints as a table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

from ..attn.temperature import QueryTemperature
from ..config import check_int
from .spec import EncodingSpec, LayerSpec, at_layer, describe_encoding, encoding_kind

__all__ = ["WIDTH", "LayerPlan"]

#: the width :meth:`LayerPlan.__str__` lays its table out in: an 80-column terminal
WIDTH = 80


def _layer(i: int, spec: Any) -> LayerSpec:
    """``spec`` as a :class:`LayerSpec` (a dict of its fields is built, naming the layer in
    its errors)."""
    if isinstance(spec, LayerSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise TypeError(f"layer {i}: must be a LayerSpec or a dict, got {type(spec).__name__}")
    accepted = [f.name for f in fields(LayerSpec) if f.init]
    unknown = sorted(set(spec) - set(accepted))
    if unknown:
        raise TypeError(f"layer {i}: unknown field(s) {unknown}; accepted: {accepted}")
    try:
        return LayerSpec(**spec)
    except (TypeError, ValueError) as e:
        raise at_layer(f"layer {i}", e) from e


def _kind(name: str, spec: Any) -> str:
    """The kind of the encoding ``spec`` (:func:`~posenc.models.spec.encoding_kind`), its
    errors naming the argument ``name``."""
    try:
        return encoding_kind(spec)
    except (TypeError, ValueError) as e:
        raise at_layer(name, e) from e


def _count(name: str, value: Any, minimum: int = 1) -> int:
    """``value``, checked by :func:`~posenc.config.check_int`."""
    check_int(name, value, minimum=minimum)
    return value


@dataclass(frozen=True)
class LayerPlan:
    """One :class:`LayerSpec` per layer, and an optional additive encoding at the input.

    Attributes:
        layers: the layers' specs, first layer first: :class:`LayerSpec` records, or dicts
            of their fields (``{"encoding": "rope", "window": 128}``, errors then name the
            layer); stored as a tuple of LayerSpec.
        input: an additive encoding added to the token embeddings once, or None.

    Example:
        >>> plan = LayerPlan.nope_every(4, encoding="rope")
        >>> [describe_encoding(layer.encoding) for layer in plan]
        ['rope', 'rope', 'rope', 'nope']
    """

    layers: Sequence[LayerSpec | Mapping[str, Any]]
    input: EncodingSpec = None

    def __post_init__(self) -> None:
        if isinstance(self.layers, (str, bytes, Mapping)) or not isinstance(self.layers, Sequence):
            raise TypeError(f"layers must be a sequence of LayerSpec, got {self.layers!r}")
        layers = tuple(_layer(i, spec) for i, spec in enumerate(self.layers))
        if not layers:
            raise ValueError("a plan needs at least one layer")
        object.__setattr__(self, "layers", layers)
        if self.input == "none":
            object.__setattr__(self, "input", None)
        kind = _kind("input", self.input)
        if kind not in ("additive", "none"):
            raise ValueError(
                f"input must be an additive encoding, got {describe_encoding(self.input)!r} "
                f"({kind}): give {kind} encodings to the layers (LayerSpec(encoding=...))"
            )

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[LayerSpec]:
        return iter(self.specs)

    def __getitem__(self, i: int) -> LayerSpec:
        return self.specs[i]

    @property
    def specs(self) -> tuple[LayerSpec, ...]:
        """The layers' specs (``layers``, typed)."""
        return cast(tuple[LayerSpec, ...], self.layers)

    @classmethod
    def uniform(cls, n_layers: int, encoding: EncodingSpec, **layer: Any) -> LayerPlan:
        """The same ``encoding`` in every layer (an additive one at the input, NoPE layers),
        and the same :class:`LayerSpec` keywords (``window=4096``: Mistral 7B).

        Example:
            >>> LayerPlan.uniform(2, "sinusoidal").input
            'sinusoidal'
        """
        _count("n_layers", n_layers)
        if encoding_kind(encoding) == "additive":
            return cls([LayerSpec(None, **layer)] * n_layers, input=encoding)
        return cls([LayerSpec(encoding, **layer)] * n_layers)

    @classmethod
    def nope_every(
        cls,
        n_layers: int,
        every: int = 4,
        encoding: EncodingSpec = "rope",
        *,
        chunk: int | None = None,
        window: int | None = None,
        temperature: bool | QueryTemperature | None = None,
    ) -> LayerPlan:
        """``encoding`` in every layer but every ``every``-th, which has none (NoPE).

        Layer ``i`` (0-based) is NoPE when ``(i + 1) % every == 0``: layers 3, 7, 11, ...
        for ``every=4``, as transformers' Llama 4 and SmolLM3 configs default their
        ``no_rope_layers`` (``int((i + 1) % no_rope_layer_interval != 0)``, 1 = RoPE).
        ``chunk`` and ``window`` apply to the encoded layers (Llama 4: ``chunk=8192``),
        ``temperature`` to the NoPE ones (Llama 4: True).
        """
        _count("n_layers", n_layers)
        _count("every", every, minimum=2)
        encoded = LayerSpec(encoding, window=window, chunk=chunk)
        nope = LayerSpec(None, temperature=temperature)
        return cls([nope if (i + 1) % every == 0 else encoded for i in range(n_layers)])

    @classmethod
    def local_global(
        cls,
        n_layers: int,
        ratio: int | tuple[int, int] = (3, 1),
        *,
        window: int,
        local: EncodingSpec = "rope",
        global_: EncodingSpec = "rope",
        sinks: bool = False,
        softcap: float | None = None,
    ) -> LayerPlan:
        """Local layers (``local`` encoding, a sliding ``window``) and global ones
        (``global_`` encoding, full attention), repeating.

        ``ratio=(L, G)``: ``L`` local layers, then ``G`` global ones; an int ``p``: a
        pattern of ``p`` layers, the last global (transformers' ``sliding_window_pattern``:
        layer ``i`` is global when ``(i + 1) % p == 0``). ``sinks`` and ``softcap`` apply
        to every layer. Gemma 3: ``ratio=6``, local RoPE base 10,000 with ``window=1024``,
        global base 1,000,000; Cohere2: ``ratio=4``, ``global_="nope"``; Gemma 2:
        ``ratio=(1, 1)``, ``window=4096``, ``softcap=50.0``.
        """
        _count("n_layers", n_layers)
        _count("window", window)  # None would make the local layers full attention
        if isinstance(ratio, tuple) and len(ratio) == 2:
            n_local, n_global = _count("ratio[0]", ratio[0]), _count("ratio[1]", ratio[1])
        elif isinstance(ratio, int) and not isinstance(ratio, bool):
            n_local, n_global = _count("ratio", ratio, minimum=2) - 1, 1
        else:
            raise TypeError(f"ratio must be an int or a pair (local, global), got {ratio!r}")
        _kind("local", local)
        _kind("global_", global_)
        near = LayerSpec(local, window=window, sinks=sinks, softcap=softcap)
        far = LayerSpec(global_, sinks=sinks, softcap=softcap)
        period = n_local + n_global
        return cls([near if i % period < n_local else far for i in range(n_layers)])

    @classmethod
    def alternate(
        cls,
        n_layers: int,
        window: int = 128,
        encoding: EncodingSpec = "rope",
        *,
        sinks: bool = False,
    ) -> LayerPlan:
        """Even layers (0, 2, ...) with a sliding ``window``, odd ones full, ``encoding``
        in all: gpt-oss (``window=128``, ``sinks=True``; its ``layer_types``)."""
        return cls.local_global(
            n_layers, (1, 1), window=window, local=encoding, global_=encoding, sinks=sinks
        )

    def lines(self, width: int = WIDTH) -> list[str]:
        """The plan as table lines no wider than ``width`` where its words allow: one row
        per layer (the input's first), columns two spaces apart, a rule under the header.
        Where a row would be wider, each encoding longer than its name is a label (``rope
        [1]``), spelled out in a legend below the table, wrapped at spaces to ``width``.

        Example:
            >>> scaled = {"name": "rope", "base": 5e5, "scaling": {"rope_type": "linear",
            ...     "factor": 8.0}}
            >>> print("\\n".join(LayerPlan.uniform(2, scaled).lines(width=60)))
            layer  encoding  pattern  sinks  softcap  temperature
            -----  --------  -------  -----  -------  -----------
            0      rope [1]  full     no     -        -
            1      rope [1]  full     no     -        -
            [1] rope base=500000 scaling=linear(factor=8)
        """
        check_int("width", width, minimum=1)
        header = ["layer", "encoding", "pattern", "sinks", "softcap", "temperature"]
        rows = [[str(i), *spec.row()] for i, spec in enumerate(self.specs)]
        if self.input is not None:
            rows.insert(0, ["input", describe_encoding(self.input), "-", "-", "-", "-"])
        lines = _grid(header, rows)
        if max(len(line) for line in lines) <= width:
            return lines
        labels: dict[str, str] = {}  # an encoding's description -> its label
        for row in rows:
            name = row[1].split(" ", 1)[0]
            if row[1] != name:
                row[1] = labels.setdefault(row[1], f"{name} [{len(labels) + 1}]")
        legend = [
            line
            for text, label in labels.items()
            for line in textwrap.wrap(
                f"{label.split(' ', 1)[1]} {text}",
                width,
                subsequent_indent="    ",
                break_long_words=False,  # a value wider than the width stays whole
                break_on_hyphens=False,
            )
        ]
        return [*_grid(header, rows), *legend]

    def __str__(self) -> str:
        """The plan as a table no wider than 80 columns (:meth:`lines`)."""
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        """How many layers, then the table of :meth:`__str__`: one short line per layer,
        where the fields of every spec, one line each, made rows of hundreds of columns."""
        layers = "layer" if len(self) == 1 else "layers"
        return f"LayerPlan of {len(self)} {layers}:\n{self}"


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """``header`` and ``rows`` as lines: columns padded to their widest cell, two spaces
    apart, a rule under the header, no trailing spaces."""
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
