"""AFMoE: RoPE on the sliding layers only, as Cohere2
(:func:`~posenc.hf.families.cohere2.rope_on_sliding`), from the ``layer_types`` a
``config.json`` must give: posenc has not read a rule its config class derives them by."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .cohere2 import rope_on_sliding
from .common import Family

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    return rope_on_sliding(keys, layout, None)


FAMILY = Family(read)
