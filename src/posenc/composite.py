"""Sums of additive encodings: several position signals added to the same embeddings.

Time-series models add more than one signal at each step, e.g. Informer's value embedding
plus a sinusoidal position plus calendar embeddings (Zhou et al. 2021, arXiv:2012.07436):
``posenc.compose("sinusoidal", "calendar", dim=64)`` is one additive encoding that adds
both, computed in float32 and rounded once, like any single one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .base import AdditiveConfig, AdditiveEncoding, Encoding
from .builder import build
from .config import check_int
from .encoding_info import EncodingInfo

__all__ = ["Compose", "compose"]


@dataclasses.dataclass(frozen=True)
class ComposeConfig(AdditiveConfig):
    """``dim``: the common size of the members (derived from them)."""

    encoding_name = "compose"

    dim: int

    def __post_init__(self) -> None:
        check_int("dim", self.dim)


class Compose(AdditiveEncoding):
    """The sum of additive encodings of one ``dim`` on the same positions::

        encode(p) = Σ_j member_j.encode(p),   forward(x, p) = x + encode(p)

    Positions are checked against every member (integer-only tables, learned limits: the
    smallest limit applies and is named). Not registered: build it with :func:`compose`.

    Shapes:
        x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]`` ->
        ``encode``: ``positions.shape + (dim,)``.
    """

    Config = ComposeConfig
    config: ComposeConfig

    def __init__(self, *encodings: Encoding) -> None:
        if not encodings:
            raise ValueError("compose needs at least one additive encoding")
        members: list[AdditiveEncoding] = []
        for enc in encodings:
            if not isinstance(enc, AdditiveEncoding):
                kind = enc.kind if isinstance(enc, Encoding) else type(enc).__name__
                raise ValueError(f"compose sums additive encodings only, got {kind!r}")
            members.append(enc)
        dims = [enc.dim for enc in members]
        if len(set(dims)) != 1:
            got = ", ".join(f"{enc.info.name} dim={enc.dim}" for enc in members)
            raise ValueError(f"compose needs one dim for every encoding, got {got}")
        super().__init__(ComposeConfig(dim=dims[0]))
        self.encodings = nn.ModuleList(members)
        axes = {enc.position_axes for enc in members}
        if len(axes) != 1:
            got = ", ".join(f"{enc.info.name} {enc.position_axes}" for enc in members)
            raise ValueError(f"compose needs one number of position axes, got {got}")
        self.position_axes = axes.pop()
        if self.position_axes != 1:  # grid encodings must read the same tokens as prefix
            configs: list[Any] = [enc.config for enc in members]  # grid configs: grid, prefix
            prefixes = {config.prefix for config in configs}
            grids = {config.grid for config in configs} - {None}
            if len(prefixes) != 1 or len(grids) > 1:
                got = ", ".join(
                    f"{enc.info.name} grid={config.grid} prefix={config.prefix}"
                    for enc, config in zip(members, configs, strict=True)
                )
                raise ValueError(f"compose needs one grid and one prefix, got {got}")
        # members check their own ranges below; negative coordinates pass if all take them
        self.nonnegative_positions = any(enc.nonnegative_positions for enc in members)
        self.integer_positions = any(enc.integer_positions for enc in members)
        self.info = EncodingInfo(
            name="compose(" + ", ".join(enc.info.name for enc in members) + ")",
            kind="additive",
            trainable=any(p.requires_grad for p in self.parameters()),
            relative=False,
            extrapolates=all(enc.info.extrapolates for enc in members),
            reference="; ".join(enc.info.reference for enc in members),
            summary="the sum of " + ", ".join(enc.info.name for enc in members),
            formula="x'_p = x_p + " + " + ".join(f"PE_{enc.info.name}[p]" for enc in members),
        )

    def _members(self) -> list[AdditiveEncoding]:
        """The members, typed (iterating an ``nn.ModuleList`` yields plain Modules)."""
        return [enc for enc in self.encodings if isinstance(enc, AdditiveEncoding)]

    def reset_parameters(self) -> None:
        for enc in self._members():
            reset = getattr(enc, "reset_parameters", None)
            if callable(reset):
                reset()

    @property
    def limit_name(self) -> str:
        return self._smallest_limit()[1]

    def position_limit(self) -> int | None:
        return self._smallest_limit()[0]

    def _smallest_limit(self) -> tuple[int | None, str]:
        limits = [(enc.position_limit(), enc.limit_name) for enc in self._members()]
        known = [(limit, name) for limit, name in limits if limit is not None]
        return min(known) if known else (None, "max_positions")

    def check_positions(
        self, positions, *, seq_len=None, batch=None, name="positions", device=None
    ) -> torch.Tensor:
        """The smallest limit first (so it is the one named), then every member's checks."""
        checked = super().check_positions(
            positions, seq_len=seq_len, batch=batch, name=name, device=device
        )
        for enc in self._members():
            enc.check_positions(checked, seq_len=seq_len, batch=batch, name=name, device=device)
        return checked

    def default_positions(self, seq_len, device=None, offset=0) -> torch.Tensor:
        positions = self._members()[0].default_positions(seq_len, device, offset)
        self.check_positions(positions)
        return positions

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        first, *rest = self._members()
        out = first._encode(positions, dtype)
        for enc in rest:
            out = out + enc._encode(positions, dtype)
        return out

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def compose(*encodings: str | Mapping[str, Any] | Encoding, dim: int | None = None) -> Compose:
    """One additive encoding that sums ``encodings`` (instances, names or dicts with a
    ``"name"`` key, built with ``dim``); mismatched dims raise ``ValueError``.

    Example:
        >>> import torch
        >>> from posenc.composite import compose  # also posenc.compose
        >>> enc = compose("sinusoidal", {"name": "sinusoidal", "layout": "concat"}, dim=4)
        >>> enc.encode(torch.tensor([0]))
        tensor([[0., 1., 1., 2.]])
    """
    sizes = {} if dim is None else {"dim": dim}
    built: list[Encoding] = []
    for i, spec in enumerate(encodings):
        if not isinstance(spec, (Encoding, str, Mapping)):
            raise TypeError(
                f"each encoding must be an Encoding, a registered name or a dict with a "
                f"'name' key; encodings[{i}] is a {type(spec).__name__}"
            )
        if not isinstance(spec, Encoding) and dim is None:
            raise ValueError(f"pass dim= to build {spec!r} by name")
        built.append(build(spec, **sizes))
    return Compose(*built)
