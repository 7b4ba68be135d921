"""EXAONE 4, EXAONE-MoE, Kolibri: RoPE on the sliding layers only when a window is set
(every layer without one), the layers read as :mod:`~posenc.hf.families.sliding_full`."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from . import sliding_full
from .common import Family

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    """EXAONE 4: RoPE on the sliding layers only (NoPE global ones) when there is a window."""
    specs, windowed = sliding_full.read(keys, layout), keys.get("sliding_window") is not None
    return [LayerSpec(None) if windowed and s.window is None else s for s in specs]


FAMILY = Family(read)
