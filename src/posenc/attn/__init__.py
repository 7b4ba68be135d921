"""Attention with a positional encoding plugged in: the layer above the encodings.

One module per concept:

- :mod:`~posenc.attn.core`: :func:`attention` and the dispatch by the encoding's kind
  (rotary, bias, none; additive is refused); :mod:`~posenc.attn.checks`, the checks of
  its arguments;
- :mod:`~posenc.attn.context`: :class:`AttentionContext`, the positions and masks that
  the layers of one forward share;
- :mod:`~posenc.attn.masks`: causal, padding and segment masks for every backend;
- :mod:`~posenc.attn.pattern`: :class:`~posenc.attn.pattern.AttnPattern`, the sliding
  window or chunk a query sees, by position, and the softcap and sinks checks;
- :mod:`~posenc.attn.backends`: what every backend choice shares, and
  :func:`~posenc.attn.backends.plan_plain`, the backend of attention without a bias,
  which :mod:`~posenc.attn.plain` runs;
- :mod:`~posenc.attn.bias_plan`: :func:`plan_bias`, the one choice of the backend that
  runs a bias encoding, with the table of the backends;
- :mod:`~posenc.attn.bias`: one runner per backend of bias encodings;
- :mod:`~posenc.attn.forget`: FoX's forget bias as extra key coordinates on plain
  attention; :mod:`~posenc.attn.contextual`: CoPE's bias of each row's scores, the
  explicit softmax by blocks of rows;
- :mod:`~posenc.attn.explicit`: the softmax written out in float32, the path of softcap,
  sinks, values added by the encoding and values that are not all finite;
- the backends: :mod:`~posenc.attn.linear_bias` (ALiBi fused into CPU SDPA),
  :mod:`~posenc.attn.flash_blocks` (the CPU flash kernel by blocks of queries, forward and
  backward) under :mod:`~posenc.attn.bias_blocks` (shift-invariant biases from their
  distances), :mod:`~posenc.attn.bias_rows` (a bias computed per block of rows: FIRE) and
  :mod:`~posenc.attn.bias_grad` (a bias table), :mod:`~posenc.attn.shaw_grad` (Shaw's
  attention blockwise, its distance bins in :mod:`~posenc.attn.shaw_bins`) and
  :mod:`~posenc.attn.flex` (compiled flex attention and its cached block masks);
- :mod:`~posenc.attn.cache`: :class:`KVCache` for incremental decoding, with rolling
  buffers for window and chunk layers;
- :mod:`~posenc.attn.temperature`: Llama 4's query temperature tuning,
  :func:`~posenc.attn.temperature.query_temperature`.

Import the public names from ``posenc.attn`` or from ``posenc``, where
``posenc.attention(...)`` is the function.
"""

from .bias_plan import BACKENDS, BiasPlan, plan_bias
from .cache import KVCache
from .context import AttentionContext
from .core import attention
from .masks import Masks
from .pattern import AttnPattern

__all__ = [
    "BACKENDS",
    "AttentionContext",
    "AttnPattern",
    "BiasPlan",
    "KVCache",
    "Masks",
    "attention",
    "plan_bias",
]
