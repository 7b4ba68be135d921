"""The kind ``none``: no positional signal (NoPE)."""

from __future__ import annotations

import torch

from .encoding import Encoding, check_float_tensor

__all__ = ["NoEncoding"]


class NoEncoding(Encoding):
    """No positional signal: order reaches the model only through the causal mask.

    Calling it returns its input unchanged, so it can stand where an additive encoding would.
    """

    kind = "none"

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` unchanged; ``x`` and any ``positions`` are checked as an additive encoding
        checks them, so that swapping encodings never hides a bad input.

        Shapes:
            x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]``. Returns x.
        """
        check_float_tensor("x", x)
        if x.dim() != 3:
            raise ValueError(f"x must be [batch, seq, dim], got shape {tuple(x.shape)}")
        if positions is not None:
            self.check_positions(positions, seq_len=x.shape[1], batch=x.shape[0], device=x.device)
        return x
