"""Learned absolute position embeddings: one trainable row per position up to a maximum
(Vaswani et al. 2017 Table 3 row E; GPT-2, Radford et al. 2019; BERT, Devlin et al. 2019).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..base import AdditiveConfig, AdditiveEncoding
from ..config import check_choice, check_float, check_int
from ..functional.sinusoidal import sinusoidal
from ..registry import register

__all__ = ["Learned"]

RESIZE_MODES = ("interpolate", "extend")


@dataclasses.dataclass(frozen=True)
class LearnedConfig(AdditiveConfig):
    """Configuration of :class:`Learned`.

    Attributes:
        dim: embedding size.
        max_positions: rows in the table (a hard length limit).
        init_std: standard deviation of the normal initialisation. The default 1.0 is
            ``nn.Embedding``'s, and matches :class:`~posenc.models.TransformerLM`, whose
            token embeddings enter at unit scale (Vaswani et al.); GPT-2 uses 0.02 for both
            tables, so pass ``init_std=0.02`` beside token embeddings of that scale.
    """

    dim: int
    max_positions: int = 2048
    init_std: float = 1.0

    def __post_init__(self) -> None:
        check_int("dim", self.dim)
        check_int("max_positions", self.max_positions)
        check_float("init_std", self.init_std)


@register(
    "learned",
    trainable=True,
    relative=False,
    extrapolates=False,
    reference="Radford et al. 2019 (GPT-2); Devlin et al. 2019 (BERT), arXiv:1810.04805",
    summary="a trainable vector per position, up to a hard maximum length",
    formula=(
        "x'_p = x_p + W[p]:  W a learned table of max_positions × d,  0 ≤ p < max_positions\n"
        "(a position at or past max_positions is an error)"
    ),
)
class Learned(AdditiveEncoding):
    """A trainable table ``weight`` of ``[max_positions, dim]``.

    A position at or past ``max_positions`` raises :class:`posenc.PositionOutOfRangeError`
    (a ``ValueError``) naming the limit: a model trained with 2048 rows cannot read token
    2049, and says so. :meth:`resize` grows the table.

    Shapes:
        positions: ``[seq]`` or ``[batch, seq]`` integers -> ``positions.shape + (dim,)``.
    """

    Config = LearnedConfig
    config: LearnedConfig
    integer_positions = True

    def __init__(self, config: LearnedConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        self.weight = nn.Parameter(torch.empty(c.max_positions, c.dim, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=self.config.init_std)

    def position_limit(self) -> int:
        return self.config.max_positions

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return F.embedding(positions, self.weight).to(dtype)

    @torch.no_grad()
    def resize(self, new_max_positions: int, mode: str = "interpolate") -> Learned:
        """Grow the table to ``new_max_positions`` rows, in place, and return ``self``.

        Args:
            new_max_positions: the new number of rows; must exceed the current one.
            mode: ``"interpolate"`` stretches the learned rows over the new length by linear
                interpolation in float32 (first and last rows kept, as position
                interpolation does for RoPE); ``"extend"`` keeps every learned row and
                initialises the new rows with the sinusoidal encoding of their positions.

        The parameter is replaced, so build the optimizer (again) after resizing.
        """
        check_int("new_max_positions", new_max_positions)
        check_choice("mode", mode, RESIZE_MODES)
        old = self.config.max_positions
        if new_max_positions <= old:
            raise ValueError(
                f"new_max_positions must exceed max_positions={old}, got {new_max_positions}"
            )
        weight = self.weight.detach().float()  # [old, dim]
        if mode == "interpolate":
            rows = weight.T.unsqueeze(0)  # [1, dim, old]
            if old == 1:
                new = rows.expand(-1, -1, new_max_positions)[0].T
            else:
                stretched = F.interpolate(
                    rows, size=new_max_positions, mode="linear", align_corners=True
                )
                new = stretched[0].T  # [new, dim]
        else:
            positions = torch.arange(old, new_max_positions, device=weight.device)
            extra = sinusoidal(positions, self.config.dim)  # [new - old, dim]
            new = torch.cat((weight, extra), dim=0)
        requires_grad = self.weight.requires_grad
        self.weight = nn.Parameter(new.to(self.weight.dtype).contiguous(), requires_grad)
        self.config = self.config.replace(max_positions=new_max_positions)
        return self
