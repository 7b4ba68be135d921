"""Attention with a positional encoding plugged in: the layer above the encodings.

One module per concept:

- :mod:`~posenc.attention.core`: :func:`attention`, its input checks and the dispatch by
  the encoding's kind (rotary, bias, none; additive is refused);
- :mod:`~posenc.attention.bias`: the backends of bias encodings (``auto``, flex, SDPA,
  math) and the choice between them;
- :mod:`~posenc.attention.linear_bias`: the fused CPU SDPA path for biases linear in the
  distance (ALiBi);
- :mod:`~posenc.attention.flex`: compiled flex attention and its cached block masks;
- :mod:`~posenc.attention.masks`: causal, padding and segment masks for every backend;
- :mod:`~posenc.attention.cache`: :class:`KVCache` for incremental decoding.

Import the public names from ``posenc.attention``; ``posenc.attention(...)`` itself is the
function (the package ``posenc`` binds the name to it).
"""

from .bias import BACKENDS
from .cache import KVCache
from .core import attention
from .masks import Masks

__all__ = ["BACKENDS", "KVCache", "Masks", "attention"]
