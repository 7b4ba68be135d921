"""FIRE: a learned MLP of the log-compressed distance, normalised by the query position (Li
et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context
Transformers", arXiv:2310.04418). The math is in :mod:`posenc.functional.fire`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, InvariantBelow
from ..config import check_float, check_int
from ..functional.dtypes import math_dtype
from ..functional.fire import (
    fire_input,
    fire_input_bound,
    fire_mlp,
    fire_mlp_matmul,
    fire_pieces,
    pieces_within,
    units_within,
)
from ..functional.fire_rows import fire_rows, pieces_pay
from ..registry import register
from .inputs import check_bias_inputs

__all__ = ["Fire"]

#: the largest input is widened by this fraction before the kinks above it are dropped: the
#: compiled kernel rounds the inputs its own way (an ulp is about 1e-7)
BOUND_MARGIN = 1e-4


@dataclasses.dataclass(frozen=True)
class FireConfig(BiasConfig):
    """Configuration of :class:`Fire`.

    Attributes:
        n_heads: attention heads, one output of the MLP each.
        hidden: the MLP's hidden width (32 in the paper).
        init_c: the initial log-transform scale ``c`` (0.1 in the paper's code).
        init_threshold: the initial threshold ``L`` (512 in the paper's code).
    """

    n_heads: int
    hidden: int = 32
    init_c: float = 0.1
    init_threshold: float = 512.0

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("hidden", self.hidden)
        check_float("init_c", self.init_c)
        check_float("init_threshold", self.init_threshold)


@register(
    "fire",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Li et al. 2023, FIRE, arXiv:2310.04418",
    summary="a learned MLP of log(c|i-j|+1) / log(c·max(L, i)+1): progressive interpolation",
    formula=(
        "s_ij = q_i·k_j/√d + f_θ(ψ(|i − j|) / ψ(max(L, i)))_h,  ψ(x) = log(|c·x| + 1)\n"
        "f_θ: Linear(1, hidden) → ReLU → Linear(hidden, H), learned;  c learned (init_c),\n"
        "L = |threshold_scale|·init_threshold, threshold_scale learned (initially 1)"
    ),
)
class Fire(InvariantBelow, BiasEncoding):
    """FIRE: ``b(i, j) = f_θ(ψ(|i - j|) / ψ(max(L, i)))``, ``ψ(x) = log(|c·x| + 1)``.

    Parameters (named and initialised as in the paper's PyTorch code):

    - ``mlp``: ``Linear(1, hidden) -> ReLU -> Linear(hidden, n_heads)``, PyTorch's default
      ``nn.Linear`` initialisation;
    - ``c``: a scalar, ``init_c``;
    - ``threshold_scale``: a scalar, 1; the threshold is ``L = |threshold_scale| ·
      init_threshold`` (the code's ``L_multiplier``: learning a multiplier of a fixed
      initial value gives ``L`` steps of a useful size).

    Not relative: past the threshold the bias depends on the query position too (its
    normaliser). Queries before their key (bidirectional attention) use ``|i - j|``.
    Inside flex attention the MLP runs per score as an unrolled sum over its hidden units
    (:func:`~posenc.functional.fire.fire_mlp`); the materialised bias and the blockwise
    rows run it by pieces where those run compiled
    (:func:`~posenc.functional.fire.fire_mlp_pieces`). The paper learns one FIRE
    per layer (and studies sharing one across layers); posenc's ``TransformerLM`` shares
    one encoding.

    Shapes:
        ``bias(q_positions, k_positions)``: ``[n_heads, q_len, k_len]``.

    Example:
        >>> enc = Fire(n_heads=4)
        >>> enc.bias(torch.arange(3), torch.arange(3)).shape
        torch.Size([4, 3, 3])
    """

    Config = FireConfig
    config: FireConfig
    # its score_mod reads each weight of the MLP once per hidden unit: inductor's flex
    # backward refuses that (measured on an H200, torch 2.11)
    flex_backward = False

    def __init__(self, config: FireConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        cfg, fk = self.config, self.factory_kwargs
        self.mlp = nn.Sequential(
            nn.Linear(1, cfg.hidden, **fk), nn.ReLU(), nn.Linear(cfg.hidden, cfg.n_heads, **fk)
        )
        self.c = nn.Parameter(torch.empty((), **fk))
        self.threshold_scale = nn.Parameter(torch.empty((), **fk))
        self.reset_parameters()

    def _linears(self) -> tuple[nn.Linear, nn.Linear]:
        """The MLP's two linear layers, typed (indexing an ``nn.Sequential`` gives a Module)."""
        first, second = self.mlp[0], self.mlp[2]
        if not isinstance(first, nn.Linear) or not isinstance(second, nn.Linear):
            raise TypeError(f"fire's mlp must be Linear, ReLU, Linear, got {self.mlp}")
        return first, second

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for linear in self._linears():
            linear.reset_parameters()
        self.c.fill_(self.config.init_c)
        self.threshold_scale.fill_(1.0)

    def threshold(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The threshold ``L = |threshold_scale| · init_threshold`` (0-d, in ``dtype``)."""
        return _scalar(self.threshold_scale, dtype).abs() * self.config.init_threshold

    def invariant_below(self) -> float:
        """The threshold ``L``: for a query before it the normaliser ``ψ(max(L, i))`` is
        ``ψ(L)``, so its bias ``f_θ(ψ(|i - j|) / ψ(L))`` is one value per distance (and
        reaches ``L`` through ``ψ(L)``). Read from the parameter (a host sync), once while
        it is unchanged (:meth:`~posenc.base.BiasEncoding.derived`)."""
        return self.derived(("invariant_below",), self._read_threshold, host=True)

    def _read_threshold(self) -> float:
        return float(self.threshold(math_dtype(self.c.dtype)).detach())

    def _input(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The MLP's input (:func:`fire_input`) of broadcastable positions, in float32
        (float64 for float64 positions or parameters)."""
        dtype = math_dtype(q_pos.dtype, k_pos.dtype, self.c.dtype)
        c, threshold = self._scalars(dtype)
        return fire_input(q_pos.to(dtype), k_pos.to(dtype), c, threshold)

    def _scalars(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """``c`` and the threshold ``L``, 0-d, in ``dtype``."""
        return [_scalar(self.c, dtype), self.threshold(dtype)]

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        x = self._input(q_pos, k_pos)
        first, second = self._linears()
        return fire_mlp(x, head, first.weight[:, 0], first.bias, second.weight, second.bias)

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """The materialised bias, as :meth:`bias_at` computes it per score, with the MLP
        by pieces or by its matrix products (:meth:`masked_bias`: the same function,
        rounded in another order).

        Shapes:
            ``[heads, q_len, k_len]``, or ``[batch, heads, q_len, k_len]`` for
            ``[batch, len]`` positions.

        ``q`` and ``scale`` are not read (the bias depends on positions alone), but checked
        (:func:`~posenc.bias.inputs.check_bias_inputs`).
        """
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        return self.masked_bias(q_positions, k_positions).contiguous()

    def masked_bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        masked: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`bias` with ``-inf`` where ``masked``; by pieces where they run compiled
        (:func:`~posenc.functional.fire_rows.pieces_pay`), in the kernel's own layout (a
        view of ``[(batch,) q_len, k_len, heads]``: one pass, no transpose), else by the
        MLP's matrix products (:func:`~posenc.functional.fire.fire_mlp_matmul`)."""
        rows, tensors = self.block_rows(q_positions, k_positions)
        return rows(0, q_positions.shape[-1], k_positions.shape[-1], masked, *tensors)

    def block_rows(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> tuple[Callable[..., torch.Tensor], list[torch.Tensor]]:
        """The rows of a block of queries from what FIRE derives once per call: ``c`` and
        the threshold as scalars, and the MLP's pieces (or its weights, where the pieces
        would not run compiled); see :meth:`~posenc.base.BiasEncoding.block_rows`."""
        qp, kp = self._check_pair(q_positions, k_positions)
        dtype = math_dtype(qp.dtype, kp.dtype, self.c.dtype)
        qp, kp = qp.to(dtype), kp.to(dtype)
        scalars = self._scalars(dtype)
        by_pieces = pieces_pay(qp.shape[-1] * kp.shape[-1], qp.device)
        mlp = self._within(qp, kp, scalars, by_pieces)

        def rows(
            i0: int, i1: int, n: int, masked: torch.Tensor | None, *tensors: torch.Tensor
        ) -> torch.Tensor:
            (c, threshold), net = tensors[:2], tensors[2:]
            q_pos, k_pos = qp[..., i0:i1], kp[..., :n]
            if q_pos.dim() == 1 and k_pos.dim() == 1:
                q_pos, k_pos = q_pos.view(-1, 1), k_pos.view(1, -1)  # -> [blk, n]
            else:  # -> [b, blk, n]
                q_pos, k_pos = q_pos.reshape(-1, i1 - i0, 1), k_pos.reshape(-1, 1, n)
            if by_pieces:  # compiled: the input, the pieces, [(b,) heads, blk, n] in one pass
                kinks, slope, offset = net
                return fire_rows(q_pos, k_pos, c, threshold, kinks, slope, offset, masked)
            out = fire_mlp_matmul(fire_input(q_pos, k_pos, c, threshold), *net)
            return out if masked is None else out.masked_fill(masked, float("-inf"))

        return rows, [*scalars, *mlp]

    def _within(
        self, qp: torch.Tensor, kp: torch.Tensor, scalars: list[torch.Tensor], by_pieces: bool
    ) -> list[torch.Tensor]:
        """The MLP as far as the inputs of queries ``qp`` and keys ``kp`` reach it (their
        largest widened by :data:`BOUND_MARGIN` for the kernels' rounding): its pieces
        (:func:`~posenc.functional.fire.pieces_within`), or its weights with the
        units that do not bend there folded (:func:`~posenc.functional.fire.
        units_within`). The bound is read on the host, so only on the CPU in eager mode
        (where a read stalls no stream): on other devices, under ``torch.compile`` and
        where there are no inputs to bound, the whole MLP (the same function, with no
        data-dependent shape)."""
        first, second = self._linears()
        weights = [first.weight[:, 0], first.bias, second.weight, second.bias]
        eager_cpu = qp.device.type == "cpu" and not torch.compiler.is_compiling()
        bound = None
        if eager_cpu and qp.numel() and kp.numel():
            c, threshold = scalars
            with torch.no_grad():
                bound = float(fire_input_bound(qp, kp, c, threshold)) * (1 + BOUND_MARGIN)
        w1, b1, w2, b2 = (w.to(qp.dtype) for w in weights)
        if by_pieces:
            pieces = fire_pieces(w1, b1, w2, b2)
            return list(pieces if bound is None else pieces_within(*pieces, bound))
        return weights if bound is None else list(units_within(w1, b1, w2, b2, bound))


def _scalar(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The 0-d parameter ``p`` read through an index, in ``dtype``.

    Flex attention differentiates a score_mod per score (under vmap) and sums the gradient
    of a captured tensor only where the score_mod indexes it: a 0-d parameter used as it is
    fails its backward ("can not return a BatchedTensor when out_dim is None").
    """
    return p.view(1)[0].to(dtype)
