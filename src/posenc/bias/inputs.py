"""The checks of what ``bias(q_positions, k_positions, q, scale)`` takes, shared by the bias
encodings that override it (CoPE, FIRE, FoX, Shaw): both positions given, ``q`` a tensor
or None, ``scale`` a number or None, also where an encoding does not read ``q`` or
``scale``. Python facts only (no tensor is read), so they cost nothing beside the bias.
"""

from __future__ import annotations

from typing import Any

from ..base import BiasEncoding

__all__ = ["check_bias_inputs"]


def check_bias_inputs(
    encoding: BiasEncoding, q_positions: Any, k_positions: Any, q: Any, scale: Any
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the argument unless ``q_positions`` and
    ``k_positions`` are given (the bias is materialised for their lengths; only
    :meth:`~posenc.base.BiasEncoding.score_mod` defaults them to the indices), and ``q``
    and ``scale`` are what the base ``bias()`` takes (None or a floating-point ``[batch,
    heads, q_len, head_dim]``; None or a number > 0). The positions themselves are checked
    by the encoding (:meth:`~posenc.base.Encoding.check_positions`).
    """
    for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
        if positions is None:
            raise TypeError(
                f"{name} must be a tensor of positions, got None: bias() materialises "
                "[heads, q_len, k_len] for the lengths of the positions it is given"
            )
    encoding._check_query(q, scale)
