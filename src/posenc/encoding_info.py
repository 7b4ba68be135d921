"""What an encoding is, in words: :class:`EncodingInfo`.

A core module of its own, so that :mod:`posenc.registry` (which fills it in) and
:mod:`posenc.base` (whose classes carry it) both take it without importing each other.
"""

from __future__ import annotations

import dataclasses

__all__ = ["EncodingInfo"]


@dataclasses.dataclass(frozen=True)
class EncodingInfo:
    """What a person choosing an encoding needs to know about it.

    Attributes:
        name: the registered name, as passed to :func:`posenc.create`.
        kind: ``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``: where position enters.
        trainable: whether the encoding has learned parameters.
        relative: whether attention scores depend only on distances, not absolute positions.
        extrapolates: whether it is defined past the training length without a hard limit
            (no table that ends, no grid): it *runs* there, which ``posenc list`` and
            ``posenc info`` call "runs past training length". Not a claim that a model does
            well there: the arena's ``extrapolation`` experiment measures that (an encoding
            *extrapolates* there when its perplexity at 16L is within ×1.25 of that at L),
            and ``posenc info`` shows the published run's ratio beside this flag. The
            name is kept for the code that reads it.
        reference: the paper (authors, year, arXiv id).
        summary: one line on what it does.
        formula: the math in plain Unicode text, one to four lines (``\n`` between them),
            its symbols explained briefly.
    """

    name: str
    kind: str
    trainable: bool
    relative: bool
    extrapolates: bool
    reference: str
    summary: str
    formula: str
