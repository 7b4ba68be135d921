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
functions in :mod:`posenc.functional`; its configuration is a frozen dataclass ``Config``.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar, TypedDict

import torch
from torch import nn

from .config import EncodingConfig, check_int
from .functional.dtypes import math_dtype
from .info import EncodingInfo
from .positions import PositionOutOfRangeError, arange, check_batch, check_positions, position_at

__all__ = ["AdditiveEncoding", "BiasEncoding", "Encoding", "NoEncoding", "RotaryEncoding"]


class FactoryKwargs(TypedDict):
    """``device`` and ``dtype`` for the parameters an encoding creates (``**factory_kwargs``)."""

    device: torch.device | None
    dtype: torch.dtype | None


def _check_float_dtype(dtype: Any) -> None:
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype or None, got {dtype!r}")


class Encoding(nn.Module):
    """Base of every positional encoding.

    Subclasses set ``kind`` (through the kind base classes below) and define ``Config``.
    Build one with keyword arguments (``Sinusoidal(dim=64)``) or a ready ``Config``;
    ``device`` and ``dtype`` place any parameters.
    """

    kind: ClassVar[str]
    #: the configuration key a model fills in with its own size (None: needs no size)
    size_key: ClassVar[str | None] = None
    Config: ClassVar[type[EncodingConfig]] = EncodingConfig
    #: set by :func:`posenc.registry.register`
    info: ClassVar[EncodingInfo]
    #: coordinates per position: 1 (``[seq]`` or ``[batch, seq]``), or 2 for image grids
    #: (``[seq, 2]`` or ``[batch, seq, 2]``: row, column, as :func:`posenc.positions.grid`)
    position_axes: ClassVar[int] = 1
    #: whether positions must be >= 0 (grid coordinates, e.g. normalised ones, may be < 0)
    nonnegative_positions: ClassVar[bool] = True
    #: whether positions must be integers (table lookups)
    integer_positions: ClassVar[bool] = False
    #: the configuration key named when a position passes :meth:`position_limit`
    limit_name: ClassVar[str] = "max_positions"

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
        _check_float_dtype(dtype)
        if device is not None:
            if not isinstance(device, (torch.device, str)):
                raise TypeError(f"device must be a torch.device, a str or None, got {device!r}")
            try:
                device = torch.device(device)
            except RuntimeError:
                raise ValueError(f"device must name a torch device, got {device!r}") from None
        self.config = config
        self.factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())

    def position_limit(self) -> int | None:
        """The exclusive upper bound on positions, or None when there is none."""
        return None

    def _device(self) -> torch.device | None:
        """The device of this encoding's parameters and buffers, or None when it has none."""
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
        limit = self.position_limit()
        if limit is not None and offset + seq_len > limit:
            raise PositionOutOfRangeError(offset + seq_len - 1, limit, self.limit_name)
        return arange(seq_len, device=device, offset=offset)


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
        _check_float_dtype(dtype)
        positions = self.check_positions(positions)
        return self._encode(positions, dtype or math_dtype(positions.dtype))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x + encode(positions)``, added in float32 and rounded once to ``x.dtype``.

        Shapes:
            x: ``[batch, seq, dim]``; positions: ``[seq]`` or ``[batch, seq]``, default
            :meth:`default_positions` (``arange(seq)``). Returns ``[batch, seq, dim]``.
        """
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"x must be a floating-point tensor, got {got}")
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


class RotaryEncoding(Encoding):
    """An encoding that rotates queries and keys inside attention.

    Subclasses implement :meth:`rotation` (the per-position tables, computed once per
    forward and shared by every layer) and :meth:`rotate` (rotate one tensor with them).

    Shapes:
        q: ``[batch, heads, seq, head_dim]``; k: ``[batch, kv_heads, k_seq, head_dim]``;
        positions: ``[seq]`` or ``[batch, seq]``.
    """

    kind = "rotary"
    size_key = "head_dim"

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    @property
    def depends_on_length(self) -> bool:
        """Whether the rotation depends on the current total length (``seq_len``)."""
        return False

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The tables that rotate tokens at ``positions`` (e.g. ``(cos, sin)``).

        ``seq_len`` is the current total length, for encodings whose frequencies depend on
        it (dynamic NTK, LongRoPE); by default ``max(positions) + 1``.
        """
        raise NotImplementedError

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """Rotate ``x`` ``[batch, heads, seq, head_dim]`` (``key`` marks keys, for encodings
        that treat queries and keys differently, such as xPos).

        Named ``rotate``, not ``apply``: ``nn.Module.apply(fn)`` calls ``apply(fn)`` on
        every child, so an override would break ``model.apply(init_fn)``."""
        raise NotImplementedError

    def causal_positions(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The 1-D order of ``positions`` for a causal mask (``k <= q``), or None when they
        have none (grid coordinates; M-RoPE's ``[3, batch, seq]``): attention then masks
        by the token index."""
        return positions if self.position_axes == 1 else None

    def _check_heads(self, name: str, t: torch.Tensor) -> None:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point tensor, got {got}")
        if t.dim() != 4 or t.shape[-1] != self.head_dim:
            raise ValueError(
                f"{name} must be [batch, heads, seq, head_dim] with head_dim={self.head_dim}, "
                f"got shape {tuple(t.shape)}"
            )
        self._check_device(name, t)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        seq_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries by ``positions`` and keys by ``k_positions``.

        By default the queries are the last ``q_len`` of the ``k_len`` keys, as in
        :func:`posenc.attention`: ``arange(k_len - q_len, k_len)`` and ``arange(k_len)``;
        given ``positions`` alone serve both when the lengths agree.

        Returns:
            ``(q_rotated, k_rotated)`` with the shapes and dtypes of ``q`` and ``k``.
        """
        self._check_heads("q", q)
        self._check_heads("k", k)
        if q.shape[0] != k.shape[0] or q.device != k.device:
            raise ValueError(
                f"q and k must share their batch size and device, got q {tuple(q.shape)} on "
                f"{q.device} and k {tuple(k.shape)} on {k.device}"
            )
        if seq_len is not None:
            check_int("seq_len", seq_len)
        q_len, k_len = q.shape[2], k.shape[2]
        if positions is None:
            if k_positions is not None:
                raise ValueError("k_positions given without positions: pass both")
            if q_len > k_len:
                raise ValueError(f"q has {q_len} positions but k only {k_len}: pass positions")
            positions = self.default_positions(q_len, q.device, offset=k_len - q_len)
            k_positions = self.default_positions(k_len, k.device)
        positions = self.check_positions(
            positions, seq_len=q_len, batch=q.shape[0], device=q.device
        )
        if k_positions is None:
            if k_len != q_len:
                raise ValueError(f"k has {k_len} positions and q {q_len}: pass k_positions")
            k_positions = positions
        else:
            k_positions = self.check_positions(
                k_positions, seq_len=k_len, batch=k.shape[0], name="k_positions", device=k.device
            )
        if (
            seq_len is None
            and self.depends_on_length
            and not torch.compiler.is_compiling()
            and positions.device.type != "meta"
        ):
            # one length for queries and keys, so length-dependent frequencies agree
            seq_len = int(torch.maximum(positions.max(), k_positions.max())) + 1
        if k_positions is positions:
            q_rot = k_rot = self.rotation(positions, seq_len)
        else:
            q_rot, k_rot = self.rotation(positions, seq_len), self.rotation(k_positions, seq_len)
        return self.rotate(q, q_rot), self.rotate(k, k_rot, key=True)


class BiasEncoding(Encoding):
    """An encoding that adds one value per head and (query, key) pair to the scores.

    A subclass implements one method, :meth:`bias_at`: the bias as an elementwise function
    of head index, query position and key position. The same code then runs vectorised in
    :meth:`bias` (a materialised ``[heads, q_len, k_len]`` tensor, for short sequences and
    tests) and per score inside flex attention through :meth:`score_mod`, so no
    ``[heads, L, L]`` tensor is ever built on the fast path and the two cannot disagree.

    Shapes:
        ``bias(q_positions, k_positions)``: ``[heads, q_len, k_len]`` for 1-D positions,
        ``[batch, heads, q_len, k_len]`` for 2-D ones.
    """

    kind = "bias"
    size_key = "n_heads"
    #: True when the encoding also adds a term to the attention output (Shaw's values):
    #: attention then needs the probabilities and runs on the math path
    adds_to_values: ClassVar[bool] = False
    #: True when the bias depends on the queries (Shaw): bias() and score_mod() need ``q``
    needs_q: ClassVar[bool] = False

    @property
    def n_heads(self) -> int:
        return self.config.n_heads

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The bias for ``head`` of a query at ``q_pos`` and a key at ``k_pos``.

        Elementwise over broadcastable tensors (integer head indices and integer or float
        positions); it may only use pointwise operations and index parameters by ``head``
        or by integer functions of the positions, because inside flex attention each
        argument is a scalar per score. Read parameters through an index (``p[head]``,
        ``p.view(1)[0]`` for a scalar): a bare 0-d parameter breaks flex's backward, and a
        reduction over a new dimension cannot be lowered inside the kernel (unroll it).
        Returns float32 (float64 for float64 positions).
        """
        raise NotImplementedError

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """The materialised bias: ``[heads, q_len, k_len]``, or ``[batch, heads, q_len,
        k_len]`` when positions are ``[batch, len]``. ``q`` and ``scale`` (the attention's
        score scale) are needed only by biases that depend on the queries (Shaw's
        ``q · a_K * scale``, which overrides this). Costs
        ``heads * q_len * k_len`` memory: the fast path never calls it."""
        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        heads = torch.arange(self.n_heads, device=q_positions.device)
        if q_positions.dim() == 1 and k_positions.dim() == 1:
            h, qp, kp = heads.view(-1, 1, 1), q_positions.view(1, -1, 1), k_positions.view(1, 1, -1)
        else:
            h = heads.view(1, -1, 1, 1)
            qp = q_positions.view(-1, 1, q_positions.shape[-1], 1)  # [b, 1, q_len, 1]
            kp = k_positions.view(-1, 1, 1, k_positions.shape[-1])  # [b, 1, 1, k_len]
        return self.bias_at(h, qp, kp)

    def score_mod(
        self,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        q: torch.Tensor | None = None,
        q_offset: int = 0,
        scale: float | None = None,
    ):
        """A ``torch.nn.attention.flex_attention`` score_mod that adds this bias.

        Positions default to the indices (``q_idx + q_offset`` for queries, as in a KV
        cache where the queries follow ``q_offset`` cached keys); ``[len]`` or
        ``[batch, len]`` tensors give them explicitly.
        """

        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        check_int("q_offset", q_offset, minimum=0)

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = position_at(q_positions, b, q_idx, q_offset)
            k_pos = position_at(k_positions, b, kv_idx)
            return score + self.bias_at(h, q_pos, k_pos).to(score.dtype)

        return mod

    def _check_pair(self, q_positions, k_positions) -> tuple[Any, Any]:
        """The query and key positions (either may be None: the default) checked, keys on
        the queries' device and with a batch size that agrees, and as the bias computes
        with them (integer dtypes as int64)."""
        if q_positions is not None:
            q_positions = self.check_positions(q_positions, name="q_positions")
        if k_positions is not None:
            device = None if q_positions is None else q_positions.device
            k_positions = self.check_positions(k_positions, name="k_positions", device=device)
        batch = None if q_positions is None or q_positions.dim() == 1 else q_positions.shape[0]
        if k_positions is not None and batch not in (None, 1):
            check_batch(k_positions, batch, "k_positions")
        return q_positions, k_positions

    def linear_slopes(self, causal: bool) -> list[float] | None:
        """The per-head slopes ``m_h`` when this bias is ``-m_h · (q_pos - k_pos)`` (0: no
        bias on that head), for attention with or without the causal mask; None (the
        default) when it is not linear in the distance. :func:`posenc.attention` then runs
        it on a fused SDPA path (:mod:`posenc.attention.linear_bias`). Under the causal mask
        the bias need only be linear on keys at or before their query."""
        return None

    def value_term(self, probs: torch.Tensor, q_positions, k_positions) -> torch.Tensor:
        """The term added to the attention output by encodings with ``adds_to_values``.

        Shapes:
            probs ``[batch, heads, q_len, k_len]`` -> ``[batch, heads, q_len, head_dim]``
        """
        raise NotImplementedError


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
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"x must be a floating-point tensor, got {got}")
        if x.dim() != 3:
            raise ValueError(f"x must be [batch, seq, dim], got shape {tuple(x.shape)}")
        if positions is not None:
            self.check_positions(positions, seq_len=x.shape[1], batch=x.shape[0], device=x.device)
        return x
