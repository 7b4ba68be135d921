"""Attention with a positional encoding plugged in: the layer above the encodings.

One module per concept:

- :mod:`~posenc.attn.core`: :func:`attention`, its input checks and the dispatch by
  the encoding's kind (rotary, bias, none; additive is refused);
- :mod:`~posenc.attn.context`: :class:`AttentionContext`, the positions and masks that
  the layers of one forward share;
- :mod:`~posenc.attn.masks`: causal, padding and segment masks for every backend;
- :mod:`~posenc.attn.bias_plan`: :func:`plan_bias`, the one choice of the backend that
  runs a bias encoding, with the table of the backends;
- :mod:`~posenc.attn.bias`: one runner per backend of bias encodings;
- the backends: :mod:`~posenc.attn.linear_bias` (ALiBi fused into CPU SDPA),
  :mod:`~posenc.attn.bias_blocks` (shift-invariant biases by blocks of queries),
  :mod:`~posenc.attn.bias_grad` (the CPU flash kernel with a blockwise backward),
  :mod:`~posenc.attn.shaw_grad` (Shaw's attention blockwise) and :mod:`~posenc.attn.flex`
  (compiled flex attention and its cached block masks);
- :mod:`~posenc.attn.cache`: :class:`KVCache` for incremental decoding.

Import the public names from ``posenc.attn`` or from ``posenc``, where
``posenc.attention(...)`` is the function.
"""

from .bias_plan import BACKENDS, BiasPlan, plan_bias
from .cache import KVCache
from .context import AttentionContext
from .core import attention
from .masks import Masks

__all__ = ["BACKENDS", "AttentionContext", "BiasPlan", "KVCache", "Masks", "attention", "plan_bias"]
