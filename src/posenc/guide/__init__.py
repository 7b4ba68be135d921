"""``posenc guide``: which positional encoding to use, as a decision aid.

The article's when-to-use guide (plus images, video with text and time series) as data
(:data:`SITUATIONS`, selected by :data:`NEEDS`), each answer naming registered encodings
and, given an arena run, the numbers it measured that bear on it.

>>> from posenc.guide import guide, when_to_use
>>> [a.situation.recommend for a in guide(["general-llm"])]
[('rope',)]
>>> "You need to handle sequences longer than those trained on" in when_to_use("alibi")
True
"""

from __future__ import annotations

from .advice import Advice, find_run, guide, published_run, when_to_use
from .measured import evidence
from .situations import FLAGS, NEEDS, SITUATIONS, Situation
from .text import NO_RUN_HINT, render

__all__ = [
    "FLAGS",
    "NEEDS",
    "NO_RUN_HINT",
    "SITUATIONS",
    "Advice",
    "Situation",
    "evidence",
    "find_run",
    "guide",
    "published_run",
    "render",
    "when_to_use",
]
