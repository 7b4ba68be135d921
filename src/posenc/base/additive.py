"""The additive kind: an encoding added to the token embeddings before the first layer."""

from __future__ import annotations

import dataclasses

import torch

from ..config import EncodingConfig
from ..functional.dtypes import math_dtype
from .encoding import Encoding, check_float_dtype, check_float_tensor

__all__ = ["AdditiveConfig", "AdditiveEncoding"]


@dataclasses.dataclass(frozen=True)
class AdditiveConfig(EncodingConfig):
    """Base of the configs of additive encodings: ``dim``, the embedding size, is their
    first key (each config checks it in its ``__post_init__``)."""

    dim: int


class AdditiveEncoding(Encoding):
    """An encoding added to the token embeddings: ``y = x + encode(positions)``.

    Subclasses implement :meth:`_encode`; they may set ``integer_positions`` (table lookups)
    and return a limit from :meth:`position_limit` (learned tables).

    Shapes:
        x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]``;
        ``encode(positions)``: ``positions.shape + (dim,)``.
    """

    kind = "additive"
    size_key = "dim"
    config: AdditiveConfig

    @property
    def dim(self) -> int:
        return self.config.dim

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The encoding of each position, computed in float32 (float64 for float64 positions).

        Args:
            positions: ``[seq]`` or ``[batch, seq]``, integer or float (integer only for
                table lookups); ``[seq, 2]`` or ``[batch, seq, 2]`` for grid encodings.
            dtype: the result dtype; default float32 (float64 for float64 positions).

        Returns:
            ``positions.shape + (dim,)`` (``positions.shape[:-1] + (dim,)`` for grids).
        """
        check_float_dtype(dtype)
        positions = self.check_positions(positions)
        return self._encode(positions, dtype or math_dtype(positions.dtype))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x + encode(positions)``, added in float32 and rounded once to ``x.dtype``.

        Shapes:
            x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]``, default
            :meth:`default_positions` (``arange(seq)``). Returns ``[batch, seq, dim]``.
        """
        check_float_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(
                f"x must be [batch, seq, dim] with dim={self.dim}, got shape {tuple(x.shape)}"
            )
        self._check_device("x", x)
        if positions is None:
            positions = self.default_positions(x.shape[1], x.device)
        else:
            positions = self.check_positions(
                positions, seq_len=x.shape[1], batch=x.shape[0], device=x.device
            )
        dtype = math_dtype(x.dtype, positions.dtype)
        return (x.to(dtype) + self._encode(positions, dtype)).to(x.dtype)
