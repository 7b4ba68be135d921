"""Forgetting attention (FoX: Lin, Nikishin, He, Courville 2025, arXiv:2503.02130): a learned
forget gate per token and head, whose log-sum between a key and its query is added to the
score; a data-dependent ALiBi."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, InputBias
from ..base.encoding import check_float_tensor
from ..config import check_float, check_int
from ..functional.fox import forget_bias, forget_clock, forget_log_gates
from ..registry import register
from .inputs import check_bias_inputs, check_layer_input

__all__ = ["Fox"]


@dataclasses.dataclass(frozen=True)
class FoxConfig(BiasConfig):
    """Configuration of :class:`Fox`.

    Attributes:
        n_heads: attention heads, one forget gate each.
        dim: the width of the layer's input ``x`` the gates read (the model's ``dim``).
        bias_init: the gates' initial bias ``b_h``, or None for ``nn.Linear``'s
            initialisation, as the paper's reference implementation. A large one (x-transformers
            uses 5.0: ``f ≈ 0.993``) starts the model close to no forgetting.
    """

    n_heads: int
    dim: int
    bias_init: float | None = None

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("dim", self.dim)
        if self.bias_init is not None:
            check_float("bias_init", self.bias_init, positive=False)


@register(
    "fox",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Lin, Nikishin, He, Courville 2025 (Forgetting Transformer, ICLR), arXiv:2503.02130",
    summary="a learned forget gate per token and head; scores decay by the log gates between "
    "key and query (a data-dependent ALiBi)",
    formula=(
        "s_ij = q_i·k_j/√d_h + Σ_{l=j+1..i} log f_l   (keys j ≤ i: causal only)\n"
        "f_t = σ(w_h·x_t + b_h): head h's forget gate of token t, from the layer input x_t\n"
        "constant gates f: ALiBi with the slope −log f; no other position encoding needed"
    ),
)
class Fox(InputBias, BiasEncoding):
    """Forgetting attention's forget gates, for one attention layer.

    Every head has a forget gate per token, ``f_t = σ(w_h · x_t + b_h)``, read from the
    layer's input ``x`` (the normalised residual stream, as the queries are). The score of
    the query ``i`` and the key ``j <= i`` gains ``Σ_{l=j+1..i} log f_l = c_i − c_j``, with
    the forget clock ``c_t = Σ_{l<=t} log f_l`` (:mod:`posenc.functional.fox`).

    Positions play no part: distance is counted in gated tokens. The bias depends on the
    layer's input, so (an :class:`~posenc.base.InputBias`):

    - :meth:`clock` gives the clock of a sequence, ``[batch, n_heads, seq]``, and
      :func:`posenc.attention` takes it as ``bias=`` (the keys' clocks; the queries are the
      last ``q_len`` of them). Softmax drops the row constant ``c_i``, so attention adds
      ``−c_j`` as extra coordinates of the keys on plain SDPA or flex, and its gradient
      reaches the gates through autograd (:mod:`posenc.attn.forget`). Causal only.
    - :class:`~posenc.models.TransformerLM` gives each layer its own ``Fox`` (the paper's
      gates are per layer) and caches the clocks of past tokens.
    - :meth:`bias` materialises ``c_i − c_j`` from ``x`` (the reference and the figures).

    The paper's FoX "Pro" block adds an output gate, QK-norm and key/value shifts to the
    layer; those are not position encodings and are not part of this one.

    Shapes:
        ``clock(x)``: x ``[batch, seq, dim]`` -> ``[batch, n_heads, seq]``;
        ``bias(q_positions, k_positions, x=x)`` -> ``[batch, n_heads, q_len, k_len]``.

    Example:
        >>> import torch, posenc
        >>> fox = posenc.create("fox", n_heads=4, dim=32)
        >>> x, q = torch.randn(2, 5, 32), torch.randn(2, 4, 5, 8)
        >>> fox.clock(x).shape
        torch.Size([2, 4, 5])
        >>> posenc.attention(q, q, q, fox, bias=fox.clock(x)).shape
        torch.Size([2, 4, 5, 8])
    """

    Config = FoxConfig
    config: FoxConfig

    def __init__(self, config: FoxConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        self.gate_weight = nn.Parameter(torch.empty(c.n_heads, c.dim, **self.factory_kwargs))
        self.gate_bias = nn.Parameter(torch.empty(c.n_heads, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation, ``U(-1/√dim, 1/√dim)``; the bias ``bias_init`` if
        set."""
        bound = 1.0 / math.sqrt(self.config.dim)
        nn.init.uniform_(self.gate_weight, -bound, bound)
        if self.config.bias_init is None:
            nn.init.uniform_(self.gate_bias, -bound, bound)
        else:
            nn.init.constant_(self.gate_bias, self.config.bias_init)

    @property
    def dim(self) -> int:
        return self.config.dim

    def _check_x(self, x: torch.Tensor | None) -> torch.Tensor:
        return check_layer_input(self, x, self.dim, "attention takes bias=fox.clock(x)")

    def log_gates(self, x: torch.Tensor) -> torch.Tensor:
        """``log f_t`` of every head and token of ``x``, float32 (float64 for float64 ``x``).

        Shapes:
            x ``[batch, seq, dim]`` -> ``[batch, n_heads, seq]``.
        """
        x = self._check_x(x)
        return forget_log_gates(x, self.gate_weight, self.gate_bias)

    def clock(self, x: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """The forget clock ``c_t = start + Σ_{l<=t} log f_l`` of the tokens of ``x``: the
        ``bias=`` that :func:`posenc.attention` takes with this encoding. ``start`` is the
        clock of the token before ``x[:, 0]`` (a KV cache's last), None for none.

        Shapes:
            x ``[batch, seq, dim]``, start ``[batch, n_heads, 1]`` ->
            ``[batch, n_heads, seq]``.
        """
        log_gates = self.log_gates(x)
        if start is not None:
            check_float_tensor("start", start)
            if start.shape != (*log_gates.shape[:2], 1):
                raise ValueError(
                    f"start must be [batch, n_heads, 1] = {[*log_gates.shape[:2], 1]}, got "
                    f"shape {tuple(start.shape)}"
                )
            start = start.to(log_gates.dtype)
        return forget_clock(log_gates, start)

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
        *,
        x: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``c_i − c_j`` over the tokens of ``x``: the keys are its ``k_len`` tokens and the
        queries its last ``q_len`` (a KV cache's layout). The positions are checked but not
        read (distance is counted in gated tokens); ``q`` and ``scale`` are not read, but
        checked (:func:`~posenc.bias.inputs.check_bias_inputs`).

        Shapes:
            positions ``[q_len]`` and ``[k_len]`` (or ``[batch, len]``), x ``[batch,
            k_len, dim]`` -> ``[batch, n_heads, q_len, k_len]``, float32.
        """
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        x = self._check_x(x)
        q_len, k_len = q_positions.shape[-1], k_positions.shape[-1]
        if x.shape[1] != k_len or q_len > k_len:
            raise ValueError(
                f"x must hold the {k_len} keys' tokens (the queries are the last {q_len}), "
                f"got {x.shape[1]} tokens"
            )
        clock = self.clock(x)
        return forget_bias(clock[..., k_len - q_len :], clock)

    def bias_at(self, head, q_pos, k_pos):
        raise TypeError(
            "fox's bias depends on the layer's input, not on positions: call "
            "bias(q_positions, k_positions, x=x), or attention with bias=fox.clock(x)"
        )

    def score_mod(self, *args, **kwargs):
        raise TypeError(
            "fox's bias depends on the layer's input: attention takes bias=fox.clock(x) "
            "and runs it as extra key coordinates, with no score_mod"
        )
