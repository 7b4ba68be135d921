"""Shaw's relative position representations (Shaw, Uszkoreit, Vaswani 2018, arXiv:1803.02155):
learned vectors for clipped distances, added to the keys (and optionally the values)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, RelativeTables
from ..config import check_bool, check_float, check_int
from ..functional.shaw import shaw_index, shaw_key_bias, shaw_key_scores, shaw_value_term
from ..positions import position_at
from ..registry import register
from .inputs import check_bias_inputs

__all__ = ["Shaw"]


@dataclasses.dataclass(frozen=True)
class ShawConfig(BiasConfig):
    """Configuration of :class:`Shaw`.

    Attributes:
        n_heads: attention heads (the tables are shared by all of them, as in the paper).
        head_dim: size of each head, the width of the tables (the paper's ``d_a = d_z``).
        max_distance: the clipping distance ``k``: ``2k + 1`` rows per table (the paper
            uses k = 16 and finds no gain past k = 2).
        values: also learn ``a^V``, added to the values (eq. 3). It needs the attention
            probabilities, so attention runs it on the math path, never flex or SDPA, or,
            training on the CPU, blockwise (:mod:`posenc.attn.runners.shaw`).
        init_std: standard deviation of the tables' normal initialisation.
    """

    n_heads: int
    head_dim: int
    max_distance: int = 16
    values: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_int("head_dim", self.head_dim)
        check_int("max_distance", self.max_distance, minimum=0)
        check_bool("values", self.values)
        check_float("init_std", self.init_std)


@register(
    "shaw",
    trainable=True,
    relative=True,
    extrapolates=True,
    reference="Shaw, Uszkoreit, Vaswani 2018, arXiv:1803.02155",
    summary="learned vectors for clipped distances j - i, added to the keys (and values)",
    formula=(
        "s_ij = q_i·(k_j + a^K[clip(j − i, −k, k)])/√d_h,  k = max_distance\n"
        "values=True: o_i = Σ_j α_ij·(v_j + a^V[clip(j − i, −k, k)])\n"
        "a^K, a^V learned tables of (2k + 1) × head_dim, shared by the heads"
    ),
)
class Shaw(RelativeTables, BiasEncoding):
    """Relation-aware attention with relative position representations.

    ``e_ij = q_i · (k_j + a^K[clip(j - i, -k, k)]) * scale``: the bias is
    ``q_i · a^K[clip(j - i)] * scale``, with the scale of the scores (the paper divides the
    whole of eq. 4 by ``sqrt(d_z)``). With ``values=True`` the output gains
    ``sum_j alpha_ij a^V[clip(j - i)]`` (eq. 3).

    Unlike a position-only bias this one depends on the queries, so :meth:`bias` and
    :meth:`score_mod` need ``q`` and :meth:`bias_at` raises. The score_mod captures the
    ``[batch, heads, q_len, 2k + 1]`` tensor ``q · a^Kᵀ * scale`` (O(L·k), cheap) and reads
    one entry per score, so flex attention needs no ``[heads, L, L]`` tensor and its
    gradient reaches ``q`` and ``key_table`` through the captured tensor.

    :func:`posenc.attention` passes its own ``scale``; called directly, ``scale`` defaults
    to ``1/sqrt(head_dim)``, attention's default.

    The paper learns one pair of tables per layer, shared by the heads; posenc's
    :class:`~posenc.models.TransformerLM` shares one encoding (so one pair) by all layers.

    Shapes:
        ``bias(q_positions, k_positions, q)``: q ``[batch, n_heads, q_len, head_dim]`` ->
        ``[batch, n_heads, q_len, k_len]``; ``key_table``, ``value_table``:
        ``[2 * max_distance + 1, head_dim]``, row ``r + max_distance`` for distance ``r``.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("shaw", n_heads=4, head_dim=16, max_distance=8)
        >>> q = torch.randn(2, 4, 5, 16)
        >>> enc.bias(torch.arange(5), torch.arange(5), q=q).shape
        torch.Size([2, 4, 5, 5])
        >>> posenc.attention(q, q, q, encoding=enc).shape
        torch.Size([2, 4, 5, 16])
    """

    Config = ShawConfig
    config: ShawConfig
    #: the bias depends on the queries: bias() and score_mod() need ``q``
    needs_q: ClassVar[bool] = True
    integer_positions = True  # table rows of integer distances

    def __init__(self, config: ShawConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        rows = 2 * c.max_distance + 1
        self.key_table = nn.Parameter(torch.empty(rows, c.head_dim, **self.factory_kwargs))
        self.register_parameter("value_table", None)
        if c.values:
            self.value_table = nn.Parameter(torch.empty(rows, c.head_dim, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.key_table, std=self.config.init_std)
        if self.value_table is not None:
            nn.init.normal_(self.value_table, std=self.config.init_std)

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    @property
    def adds_to_values(self) -> bool:  # read by posenc.attention: not flex, nor SDPA
        return self.config.values

    def relative_tables(self) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``(key_table, value_table or None, max_distance)``: see
        :meth:`~posenc.base.RelativeTables.relative_tables`."""
        return self.key_table, self.value_table, self.config.max_distance

    def bias_at(self, head, q_pos, k_pos):
        raise TypeError(
            "shaw's bias q_i · a^K[j - i] depends on the queries, not on positions alone: "
            "call bias(q_positions, k_positions, q=q) or score_mod(..., q=q)"
        )

    def _check_q(self, q: torch.Tensor | None) -> torch.Tensor:
        """``q`` once checked: ``[batch, n_heads, q_len, head_dim]``, floating point."""
        if q is None:
            raise TypeError("shaw's bias depends on the queries: pass q=[batch, heads, q_len, d]")
        if not isinstance(q, torch.Tensor) or not q.is_floating_point():
            got = q.dtype if isinstance(q, torch.Tensor) else type(q).__name__
            raise TypeError(f"q must be a floating-point tensor, got {got}")
        if q.dim() != 4 or q.shape[1] != self.n_heads or q.shape[-1] != self.head_dim:
            raise ValueError(
                f"q must be [batch, heads, q_len, head_dim] with heads={self.n_heads} and "
                f"head_dim={self.head_dim}, got shape {tuple(q.shape)}"
            )
        return q

    def _scale(self, scale: float | None) -> float:
        if scale is None:
            return 1.0 / math.sqrt(self.head_dim)
        check_float("scale", scale)
        return scale

    def _index(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """Table rows of every (query, key) pair: ``[1, 1, q_len, k_len]`` or
        ``[batch, 1, q_len, k_len]``."""
        relative = k_positions.unsqueeze(-2) - q_positions.unsqueeze(-1)  # [(b,) q_len, k_len]
        index = shaw_index(relative, self.config.max_distance)
        return index.unsqueeze(-3) if index.dim() == 3 else index[None, None]

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """``q_i · a^K[clip(j - i)] * scale``, float32 (float64 for float64 ``q``).

        Shapes:
            positions ``[len]`` or ``[batch, len]`` (integer), q ``[batch, n_heads, q_len,
            head_dim]`` -> ``[batch, n_heads, q_len, k_len]``
        """
        q = self._check_q(q)
        check_bias_inputs(self, q_positions, k_positions, q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        index = self._index(q_positions, k_positions)
        return shaw_key_bias(shaw_key_scores(q, self.key_table, self._scale(scale)), index)

    def score_mod(
        self,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        q: torch.Tensor | None = None,
        q_offset: int = 0,
        scale: float | None = None,
    ):
        """A flex attention score_mod adding ``q_i · a^K[clip(j - i)] * scale``.

        Positions default to the indices (``q_idx + q_offset`` for the queries); explicit
        ones are ``[len]`` or ``[batch, len]`` integer tensors.
        """
        q = self._check_q(q)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        check_int("q_offset", q_offset, minimum=0)
        key_scores = shaw_key_scores(q, self.key_table, self._scale(scale))  # [b, h, q, 2k+1]
        max_distance = self.config.max_distance

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = position_at(q_positions, b, q_idx, q_offset)
            k_pos = position_at(k_positions, b, kv_idx)
            row = shaw_index(k_pos - q_pos, max_distance)
            return score + key_scores[b, h, q_idx, row].to(score.dtype)

        return mod

    def value_term(
        self, probs: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> torch.Tensor:
        """``sum_j probs_ij a^V[clip(j - i)]`` (eq. 3), without an ``[L, L, d]`` tensor.

        Shapes:
            probs ``[batch, heads, q_len, k_len]`` -> ``[batch, heads, q_len, head_dim]``
        """
        if self.value_table is None:
            raise ValueError("this shaw encoding has no value table: create it with values=True")
        q_positions, k_positions = self._check_pair(q_positions, k_positions)
        index = self._index(q_positions, k_positions)
        return shaw_value_term(probs, self.value_table, index)
