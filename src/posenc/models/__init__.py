"""Models that take any positional encoding: :class:`TransformerLM` and its decoding.

One module per concept:

- :mod:`~posenc.models.lm`: :class:`TransformerLM`, the pre-norm decoder (or encoder)
  every experiment in posenc uses, and the routing of its encoding by kind;
- :mod:`~posenc.models.blocks`: :class:`SelfAttention` (grouped-query heads) and the
  pre-norm :class:`Block`;
- :mod:`~posenc.models.inputs`: the checks on token ids and on the padding and document
  masks;
- :mod:`~posenc.models.shared`: what one forward computes once for every layer: the
  positions, the attention context and the bias table;
- :mod:`~posenc.models.generation`: the generate loop, :func:`sample` and
  :func:`next_positions`;
- :mod:`~posenc.models.inspection`: :func:`attention_maps`, the attention probabilities
  of every layer and head, read out by a reference path.

Import the public names from ``posenc.models``.
"""

from .blocks import Block, SelfAttention
from .generation import check_temperature, next_positions, sample
from .inspection import attention_maps
from .lm import TransformerLM

__all__ = [
    "Block",
    "SelfAttention",
    "TransformerLM",
    "attention_maps",
    "check_temperature",
    "next_positions",
    "sample",
]
