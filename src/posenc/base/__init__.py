"""The encoding base classes: one per place where position can enter attention.

===========  ======================================================  ============
kind         where it acts                                           size key
===========  ======================================================  ============
additive     added to the token embeddings before the first layer    ``dim``
rotary       rotates queries and keys inside every attention layer   ``head_dim``
bias         adds a term to the attention scores before softmax      ``n_heads``
none         nothing: order comes from the causal mask alone         --
===========  ======================================================  ============

A model needs to know only the kind. Every encoding is a thin ``nn.Module`` over pure
functions in :mod:`posenc.functional`; its configuration is a frozen dataclass ``Config``,
a subclass of its kind's config (which holds the size key).

One module per concept: :mod:`.encoding` (:class:`Encoding`, what every kind shares: config,
device and dtype, position checks and defaults), then one per kind: :mod:`.additive`,
:mod:`.rotary`, :mod:`.bias`, :mod:`.none`; and :mod:`.capabilities`, the optional protocols
a bias encoding subclasses to open a runner of attention.
"""

from .additive import AdditiveConfig, AdditiveEncoding
from .bias import BiasConfig, BiasEncoding
from .capabilities import (
    InputBias,
    InputTransforms,
    InvariantBelow,
    LinearSlopes,
    ReadsInput,
    RelativeTables,
    ScoreBias,
    ScoreWeights,
    ShiftInvariant,
)
from .encoding import Encoding, FactoryKwargs
from .none import NoEncoding
from .rotary import RotaryConfig, RotaryEncoding

__all__ = [
    "AdditiveConfig",
    "AdditiveEncoding",
    "BiasConfig",
    "BiasEncoding",
    "Encoding",
    "FactoryKwargs",
    "InputBias",
    "InputTransforms",
    "InvariantBelow",
    "LinearSlopes",
    "NoEncoding",
    "ReadsInput",
    "RelativeTables",
    "RotaryConfig",
    "RotaryEncoding",
    "ScoreBias",
    "ScoreWeights",
    "ShiftInvariant",
]
