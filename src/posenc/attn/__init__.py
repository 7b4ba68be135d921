"""Attention with a positional encoding plugged in: the layer above the encodings.

Following a call: :func:`attention` (:mod:`~posenc.attn.core`) checks its arguments
(:mod:`~posenc.attn.checks`), rotates q and k for a rotary encoding, builds the call's
positions and masks (:mod:`~posenc.attn.masks`) into one :class:`~posenc.attn.call.Call`
(:mod:`~posenc.attn.call`), asks :func:`~posenc.attn.planner.plan` which runner computes it
(:mod:`~posenc.attn.planner`: one ordered table of rows, returning one of
:mod:`~posenc.attn.plans`) and runs it
(:mod:`~posenc.attn.dispatch`: the decision kept per encoding and shapes;
:mod:`~posenc.attn.runners`: one file per runner, one signature).

- :mod:`~posenc.attn.masks`: the causal order, windows and chunks
  (:class:`AttnPattern`), padding and packed documents (:class:`Masks`), and
  :class:`AttentionContext`, what the layers of one forward share;
  :mod:`~posenc.attn.flex_masks` builds their flex block masks and
  :mod:`~posenc.attn.dead_rows` opens and zeroes the query rows that see no key;
- :mod:`~posenc.attn.forget`: FoX's forget bias as extra key coordinates of a plain call;
- :mod:`~posenc.attn.dual_chunk`: Dual Chunk Attention (``dca``), whose queries turn per
  region of keys, one explicit softmax over the regions;
- :mod:`~posenc.attn.kernels`: the CPU kernels runners share;
- :mod:`~posenc.attn.cache`: :class:`KVCache` for incremental decoding, with rolling
  buffers for window and chunk layers;
- :mod:`~posenc.attn.cache_buffers`: a cache's buffers per layer, keys and values side
  by side in one where a layer can (one copy a decode step);
- :mod:`~posenc.attn.static_cache`: :class:`StaticKVCache`, whose shapes never change (one
  compiled decode step for every position);
- :mod:`~posenc.attn.cache_checks`: the checks of both caches' arguments (each error
  names the argument; values read with a forward's other checks);
- :mod:`~posenc.attn.rerotate`: a cache's RoPE keys turned in place to shifted positions
  or new frequencies (``cache.rerotate``);
- :mod:`~posenc.attn.temperature`: Llama 4's query temperature tuning,
  :func:`~posenc.attn.temperature.query_temperature`;
- :mod:`~posenc.attn.bias_plan`: the old path of the planner's names.

Import the public names from ``posenc.attn`` or from ``posenc``, where
``posenc.attention(...)`` is the function.
"""

from .cache import KVCache
from .core import attention
from .masks import AttentionContext, AttnPattern, Masks
from .planner import BACKENDS, BiasPlan, Plan, plan, plan_bias
from .static_cache import StaticKVCache

__all__ = [
    "BACKENDS",
    "AttentionContext",
    "AttnPattern",
    "BiasPlan",
    "KVCache",
    "Masks",
    "Plan",
    "StaticKVCache",
    "attention",
    "plan",
    "plan_bias",
]
