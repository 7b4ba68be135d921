"""The checks of what ``bias(q_positions, k_positions, q, scale)`` takes, shared by the bias
encodings that override it (CoPE, FIRE, FoX, Shaw): both positions given, ``q`` a tensor
or None, ``scale`` a number or None, also where an encoding does not read ``q`` or
``scale``; and the queries and keys of the encodings that read their scores (CoPE's bias,
stick-breaking's weights). Python facts only (no tensor is read), so they cost nothing
beside the bias.
"""

from __future__ import annotations

from typing import Any

import torch

from ..base import BiasEncoding
from ..base.encoding import check_float_tensor

__all__ = ["check_bias_inputs", "check_keys_fit", "check_layer_input", "check_scored_inputs"]


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


def check_scored_inputs(
    encoding: BiasEncoding, q: Any, k: Any, head_dim: int | None, kv_heads: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` ``[batch, n_heads, q_len, head_dim]`` and ``k`` ``[batch, kv_heads, k_len,
    head_dim]`` of an encoding that reads their scores: floating-point tensors on one
    device, the encoding's, with ``head_dim`` the encoding's (None: any, the same for both)
    and ``kv_heads`` the encoding's (None: any). Raises ``TypeError``/``ValueError`` naming
    the argument."""
    q = _scored(encoding, "q", q, encoding.n_heads, head_dim)
    k = _scored(encoding, "k", k, kv_heads, q.shape[-1])
    if k.device != q.device:
        raise ValueError(f"k is on {k.device} but q on {q.device}: pass both on one device")
    return q, k


def check_keys_fit(q: torch.Tensor, k: torch.Tensor, k_positions: torch.Tensor) -> None:
    """``k`` has ``q``'s batch, ``kv_heads`` dividing ``q``'s heads and one key per
    position of ``k_positions``; else a ``ValueError`` naming ``k``."""
    if k.shape[0] != q.shape[0] or k.shape[2] != k_positions.shape[-1] or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"k must be [batch, kv_heads, k_len, head_dim] with q's batch, kv_heads "
            f"dividing q's heads and k_len the keys' positions, got shape {tuple(k.shape)}"
        )


def _scored(
    encoding: BiasEncoding, name: str, t: Any, heads: int | None, head_dim: int | None
) -> torch.Tensor:
    if t is None:
        raise TypeError(
            f"{encoding.info.name}'s scores depend on the queries and keys: pass {name}="
            "[batch, heads, len, head_dim]"
        )
    check_float_tensor(name, t)
    if t.dim() != 4 or head_dim not in (None, t.shape[-1]) or heads not in (None, t.shape[1]):
        sizes = [f"{key}={n}" for key, n in (("heads", heads), ("head_dim", head_dim)) if n]
        raise ValueError(
            f"{name} must be [batch, heads, len, head_dim]"
            + (f" with {' and '.join(sizes)}" if sizes else "")
            + f", got shape {tuple(t.shape)}"
        )
    encoding._check_device(name, t)
    return t


def check_layer_input(encoding: BiasEncoding, x: Any, dim: int, takes: str) -> torch.Tensor:
    """``x`` ``[batch, seq, dim]``, the layer's input an encoding reads (FoX's gates, PaTH's
    transforms): a floating-point tensor on the encoding's device; ``takes`` says what
    attention takes from it instead. Raises ``TypeError``/``ValueError`` naming ``x``."""
    if x is None:
        raise TypeError(
            f"{encoding.info.name} depends on the layer's input: pass x=[batch, seq, dim] ({takes})"
        )
    check_float_tensor("x", x)
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"x must be [batch, seq, dim] with dim={dim}, got shape {tuple(x.shape)}")
    encoding._check_device("x", x)
    return x
