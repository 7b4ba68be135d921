"""Attention with a positional encoding plugged in: the layer above the encodings.

One module per concept:

- :mod:`~posenc.attn.core`: :func:`attention`, its input checks and the dispatch by
  the encoding's kind (rotary, bias, none; additive is refused);
- :mod:`~posenc.attn.bias`: the backends of bias encodings (``auto``, flex, SDPA,
  math) and the choice between them;
- :mod:`~posenc.attn.linear_bias`: the fused CPU SDPA path for biases linear in the
  distance (ALiBi);
- :mod:`~posenc.attn.flex`: compiled flex attention and its cached block masks;
- :mod:`~posenc.attn.masks`: causal, padding and segment masks for every backend;
- :mod:`~posenc.attn.cache`: :class:`KVCache` for incremental decoding.

Import the public names from ``posenc.attn`` or from ``posenc``, where
``posenc.attention(...)`` is the function.
"""

from .bias import BACKENDS
from .cache import KVCache
from .core import attention
from .masks import Masks

__all__ = ["BACKENDS", "KVCache", "Masks", "attention"]
