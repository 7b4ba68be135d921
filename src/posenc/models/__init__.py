"""Models that take any positional encoding: :class:`TransformerLM`, its layer plans and
its decoding.

One module per concept:

- :mod:`~posenc.models.lm`: :class:`TransformerLM`, the pre-norm decoder (or encoder)
  every experiment in posenc uses, and the routing of its encodings by kind;
- :mod:`~posenc.models.spec`: :class:`LayerSpec`, one layer's encoding and attention
  pattern (window or chunk, sinks, softcap, query temperature);
- :mod:`~posenc.models.plan`: :class:`LayerPlan`, one spec per layer and the input's
  additive encoding, with the short forms of Llama 4, Gemma, Cohere2 and gpt-oss;
- :mod:`~posenc.models.routing`: the plan of a model's arguments, and its encodings built
  once per distinct spec;
- :mod:`~posenc.models.blocks`: :class:`SelfAttention` (grouped-query heads) and the
  pre-norm :class:`Block`;
- :mod:`~posenc.models.transforms`: a layer's transforms of an encoding that reads its
  input into the scores (PaTH), cached beside their keys, in the order of the sequence;
- :mod:`~posenc.models.calls`: a block's torch layers run as their functional ops where
  a module call would add only host time (no hooks, torch's own class);
- :mod:`~posenc.models.activation`: the MLP's exact GELU on ATen's own CPU kernel
  (oneDNN's costs ten times its host time in a decode step);
- :mod:`~posenc.models.init`: the standard deviations the weights start from;
- :mod:`~posenc.models.inputs`: the checks on token ids and on the padding and document
  masks;
- :mod:`~posenc.models.caching`: :class:`~posenc.models.caching.CacheLayout`, what a
  model's KV cache holds per layer: ``new_cache`` builds one, the forward checks a given
  one against it;
- :mod:`~posenc.models.shared`: what one forward computes once for every layer: the
  positions (checked by every encoding), the attention context and the bias tables;
- :mod:`~posenc.models.generation`: the generate loop, :func:`sample` and
  :func:`next_positions`;
- :mod:`~posenc.models.inspection`: :func:`attention_maps`, the attention probabilities
  of every layer and head, read out by a reference path;
- :mod:`~posenc.models.export`: :class:`DecodeStep`, a model and its static KV cache as
  one module for ``torch.export``.

Import the public names from ``posenc.models``.
"""

from .blocks import Block, SelfAttention
from .export import DecodeStep
from .generation import check_temperature, next_positions, sample
from .inspection import attention_maps
from .lm import TransformerLM
from .plan import LayerPlan
from .spec import LayerSpec

__all__ = [
    "Block",
    "DecodeStep",
    "LayerPlan",
    "LayerSpec",
    "SelfAttention",
    "TransformerLM",
    "attention_maps",
    "check_temperature",
    "next_positions",
    "sample",
]
