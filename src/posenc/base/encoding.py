"""The base of every positional encoding: configuration, device and dtype, and the checks
and defaults of its positions (which the kinds in :mod:`posenc.base` share)."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar, TypedDict

import torch
from torch import nn

from ..config import EncodingConfig, check_device
from ..encoding_info import EncodingInfo
from ..positions import PositionOutOfRangeError, arange, check_batch, check_positions

__all__ = [
    "Encoding",
    "FactoryKwargs",
    "check_device",
    "check_float_dtype",
    "check_float_tensor",
]


class FactoryKwargs(TypedDict):
    """``device`` and ``dtype`` for the parameters an encoding creates (``**factory_kwargs``)."""

    device: torch.device | None
    dtype: torch.dtype | None


def check_float_dtype(dtype: Any) -> None:
    """Raise ``TypeError`` unless ``dtype`` is a floating-point ``torch.dtype`` or None."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype or None, got {dtype!r}")


def check_float_tensor(name: str, t: Any) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``t`` is a floating-point tensor."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a floating-point tensor, got {got}")


class Encoding(nn.Module):
    """Base of every positional encoding.

    Subclasses set ``kind`` (through the kind base classes) and define ``Config`` (and
    annotate ``config`` with it, so type checkers know its keys). Build one with keyword
    arguments (``Sinusoidal(dim=64)``) or a ready ``Config``; ``device`` and ``dtype`` place
    any parameters.

    The position attributes below are class-level defaults that an instance may override
    (:class:`~posenc.composite.Compose` derives them from its members).
    """

    kind: ClassVar[str]
    #: the configuration key a model fills in with its own size (None: needs no size)
    size_key: ClassVar[str | None] = None
    Config: ClassVar[type[EncodingConfig]] = EncodingConfig
    config: EncodingConfig
    #: set on the class by :func:`posenc.registry.register` (on a composite, per instance)
    info: EncodingInfo
    #: coordinates per position: 1 (``[seq]`` or ``[batch, seq]``), or 2 for image grids
    #: (``[seq, 2]`` or ``[batch, seq, 2]``: row, column, as :func:`posenc.positions.grid`)
    position_axes: int = 1
    #: whether positions must be >= 0 (grid coordinates, e.g. normalised ones, may be < 0)
    nonnegative_positions: bool = True
    #: whether positions must be integers (table lookups)
    integer_positions: bool = False

    def __init__(
        self,
        config: EncodingConfig | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if config is None:
            config = self.Config.from_kwargs(**kwargs)
        elif kwargs:
            raise TypeError("pass either a Config or keyword arguments, not both")
        elif not isinstance(config, self.Config):
            raise TypeError(f"config must be a {self.Config.__name__}, got {type(config).__name__}")
        check_float_dtype(dtype)
        device = check_device(device)
        self.config = config
        self.factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())

    @property
    def limit_name(self) -> str:
        """The configuration key named when a position passes :meth:`position_limit`
        (a subclass sets it as a class attribute, e.g. ``limit_name = "grid"``)."""
        return "max_positions"

    def position_limit(self) -> int | None:
        """The exclusive upper bound on positions, or None when there is none."""
        return None

    def _device(self) -> torch.device | None:
        """The device of this encoding's parameters and buffers, or None when it has none."""
        if not (self._parameters or self._buffers or self._modules):
            return None  # nothing placed (RoPE): three dict tests, not a walk of the tree
        tensor = next(itertools.chain(self.parameters(), self.buffers()), None)
        return None if tensor is None else tensor.device

    def _check_device(self, name: str, t: torch.Tensor) -> None:
        """Raise ``ValueError`` naming ``name`` unless ``t`` is on this encoding's device
        (any device when it has no parameters or buffers)."""
        device = self._device()
        if device is not None and t.device != device:
            raise ValueError(
                f"{name} is on {t.device} but this encoding's parameters are on {device}: "
                f"move one of them (e.g. encoding.to({t.device.type!r}))"
            )

    def check_positions(
        self,
        positions: torch.Tensor,
        *,
        seq_len: int | None = None,
        batch: int | None = None,
        name: str = "positions",
        device: torch.device | None = None,
    ) -> torch.Tensor:
        """Raise ``TypeError``/``ValueError`` naming ``name`` unless ``positions`` suits this
        encoding (shape, dtype, range, device) for a sequence of ``seq_len``, a batch of
        ``batch`` and an input on ``device`` (default: this encoding's device, if it has
        parameters or buffers). Returns the positions to compute with (integer dtypes as
        int64, see :func:`~posenc.positions.check_positions`)."""
        positions = check_positions(
            positions,
            seq_len=seq_len,
            name=name,
            integer=self.integer_positions,
            limit=self.position_limit(),
            limit_name=self.limit_name,
            axes=self.position_axes,
            nonnegative=self.nonnegative_positions,
            device=self._device() if device is None else device,
        )
        if batch is not None:
            check_batch(positions, batch, name, self.position_axes)
        return positions

    def default_positions(
        self, seq_len: int, device: torch.device | str | None = None, offset: int = 0
    ) -> torch.Tensor:
        """The positions of tokens ``offset .. offset + seq_len - 1`` when none are given:
        ``arange`` (grid encodings: their configured grid)."""
        positions = arange(seq_len, device=device, offset=offset)  # checks the arguments
        limit = self.position_limit()
        if limit is not None and offset + seq_len > limit:
            raise PositionOutOfRangeError(offset + seq_len - 1, limit, self.limit_name)
        return positions
