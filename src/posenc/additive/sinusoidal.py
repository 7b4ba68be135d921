"""Sinusoidal absolute encodings (Vaswani et al. 2017, arXiv:1706.03762 §3.5), and the
scaled variant with one learned gain (Hua et al. 2022, "Transformer Quality in Linear Time",
arXiv:2202.10447, as in x-transformers).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..base import AdditiveConfig, AdditiveEncoding
from ..config import check_choice, check_float, check_int
from ..functional.sinusoidal import SINUSOIDAL_LAYOUTS, sinusoidal
from ..registry import register

__all__ = ["ScaledSinusoidal", "Sinusoidal"]


@dataclasses.dataclass(frozen=True)
class SinusoidalConfig(AdditiveConfig):
    """Configuration of :class:`Sinusoidal`.

    Attributes:
        dim: encoding size (even).
        base: the wavelength base (10000 in the paper): wavelengths grow geometrically
            from 2π to 2π·base^((dim-2)/dim).
        layout: ``"interleaved"`` (sin on even columns, cos on odd, as the paper) or
            ``"concat"`` (all sines, then all cosines, as tensor2tensor and fairseq).
    """

    dim: int
    base: float = 10000.0
    layout: str = "interleaved"

    def __post_init__(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_float("base", self.base)
        check_choice("layout", self.layout, SINUSOIDAL_LAYOUTS)


@register(
    "sinusoidal",
    trainable=False,
    relative=False,
    extrapolates=True,
    reference="Vaswani et al. 2017, Attention Is All You Need, arXiv:1706.03762",
    summary="fixed sin/cos waves of geometric wavelengths added to the embeddings",
    formula=(
        "PE[p, 2i] = sin(p·ω_i),  PE[p, 2i+1] = cos(p·ω_i),  ω_i = base^(−2i/d),  i < d/2\n"
        '(layout "concat": all d/2 sines, then all cosines);  base = 10000 in the paper\n'
        "x'_p = x_p + PE[p]:  x_p the embedding of the token at position p, d = dim"
    ),
)
class Sinusoidal(AdditiveEncoding):
    """Fixed sinusoidal encoding: no parameters, any integer or fractional position, no
    maximum length. Computed from the positions on each call in float32, so no table can
    limit the length or be rounded by ``model.to(torch.bfloat16)``.

    Shapes:
        x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]``.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("sinusoidal", dim=4)
        >>> enc.encode(torch.tensor([0]))
        tensor([[0., 1., 0., 1.]])
    """

    Config = SinusoidalConfig
    config: SinusoidalConfig

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        c = self.config
        return sinusoidal(positions, c.dim, c.base, c.layout, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class ScaledSinusoidalConfig(SinusoidalConfig):
    """Configuration of :class:`ScaledSinusoidal`: every key of :class:`SinusoidalConfig`, and

    Attributes:
        init_scale: the initial value of the learned gain (None: ``dim ** -0.5``).
    """

    init_scale: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init_scale is not None:
            check_float("init_scale", self.init_scale)


@register(
    "scaled_sinusoidal",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Hua et al. 2022, Transformer Quality in Linear Time, arXiv:2202.10447",
    summary="sinusoidal encoding times one learned scalar gain",
    formula=(
        "x'_p = x_p + g·PE[p]:  PE the sinusoidal encoding (PE[p, 2i] = sin(p·base^(−2i/d)),\n"
        "PE[p, 2i+1] = cos(p·base^(−2i/d))),  g one learned scalar, initially d^(−1/2) (init_scale)"
    ),
)
class ScaledSinusoidal(Sinusoidal):
    """Sinusoidal encoding multiplied by one learned scalar ``scale``, so the model can set
    how loud position is relative to the token embeddings."""

    Config = ScaledSinusoidalConfig
    config: ScaledSinusoidalConfig

    def __init__(self, config: ScaledSinusoidalConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.scale = nn.Parameter(torch.empty((), **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init = self.config.init_scale
        with torch.no_grad():
            self.scale.fill_(self.config.dim**-0.5 if init is None else init)

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return super()._encode(positions, dtype) * self.scale.to(dtype)
