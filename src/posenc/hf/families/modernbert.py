"""ModernBERT (bidirectional): sliding and full from ``global_attn_every_n_layers``, the
window ``local_attention``, a RoPE per type (``global_rope_theta``, ``local_rope_theta``)."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, layer_types, pattern, per_type_ropes, read_window

#: layer ``i`` full when ``i % global_attn_every_n_layers == 0``
DERIVE = pattern("global_attn_every_n_layers", first_full=True)

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING), DERIVE)
    window = read_window(keys, types, "local_attention")
    thetas = {FULL: "global_rope_theta", SLIDING: "local_rope_theta"}
    ropes = per_type_ropes(keys, layout, types, thetas, scaled=(FULL, SLIDING))
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


FAMILY = Family(read, causal=False)
