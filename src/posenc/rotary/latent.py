"""Multi-head latent attention's decoupled RoPE (DeepSeek-AI 2024, "DeepSeek-V2",
arXiv:2405.04434, section 2.1.3): :class:`LatentRoPE`.

A thin module over :class:`~posenc.rotary.RoPE` and the pure functions of
:mod:`posenc.functional.latent`: it rotates each query head's ``qk_rope_head_dim`` slice
and the one key slice all heads share, joins them to the position-free slices, and gives
the softmax scale. Not a registered encoding: it takes three tensors (q, the shared key
slice, the per-head keys), not the ``(q, k)`` of the rotary contract.
:func:`posenc.hf.latent_rope_from_hf_config` reads one from a DeepSeek-V2/V3 config.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base.encoding import check_float_tensor
from ..config import check_int
from ..functional.latent import join_latent_heads, mla_softmax_scale
from .rope import RoPE
from .scaling import YarnScaling

__all__ = ["LatentRoPE"]


class LatentRoPE(nn.Module):
    """The decoupled RoPE of multi-head latent attention (DeepSeek-V2, DeepSeek-V3).

    Each query head is ``[q_nope | q_rope]``. The keys are ``k_nope`` per head (from the
    compressed latent, which a rotation cannot pass through) and one ``k_rope`` slice shared
    by every head. ``q_rope`` and ``k_rope`` turn by ``rope``; ``k_rope`` is broadcast to
    the heads; the result is ordinary ``[batch, heads, len, qk_head_dim]`` query and key
    heads for :func:`posenc.attention` or SDPA with ``scale=self.softmax_scale``.

    Args:
        qk_nope_head_dim: the channels of each query and key head that carry no position.
        rope: a plain :class:`~posenc.rotary.RoPE` whose ``head_dim`` is
            ``qk_rope_head_dim`` and which rotates all of it; its layout is the model's
            (DeepSeek-V3: ``"interleaved"`` when ``rope_interleave``, else ``"half"``).

    Shapes:
        q ``[batch, heads, q_len, qk_nope_head_dim + qk_rope_head_dim]``,
        k_rope ``[batch, 1, k_len, qk_rope_head_dim]``,
        k_nope ``[batch, heads, k_len, qk_nope_head_dim]``,
        positions ``[q_len]`` or ``[batch, q_len]`` (k_positions likewise ``k_len``) ->
        q, k ``[batch, heads, q_len or k_len, qk_head_dim]`` in the dtype of the inputs.

    Example:
        >>> import torch, posenc
        >>> from posenc.rotary import LatentRoPE, RoPE
        >>> mla = LatentRoPE(8, RoPE(head_dim=4, layout="interleaved"))
        >>> q, k_rope = torch.randn(2, 4, 6, 12), torch.randn(2, 1, 6, 4)
        >>> k_nope, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
        >>> q2, k2 = mla(q, k_rope, k_nope)
        >>> out = posenc.attention(q2, k2, v, scale=mla.softmax_scale)
        >>> tuple(k2.shape), tuple(out.shape), mla.softmax_scale == 12 ** -0.5
        ((2, 4, 6, 12), (2, 4, 6, 8), True)
    """

    def __init__(self, qk_nope_head_dim: int, rope: RoPE) -> None:
        super().__init__()
        check_int("qk_nope_head_dim", qk_nope_head_dim)
        if type(rope) is not RoPE:  # MRoPE and XPos rotate otherwise than MLA's slice
            raise TypeError(f"rope must be a posenc.rotary.RoPE, got {type(rope).__name__}")
        if rope.config.rotary_dim != rope.head_dim:
            raise ValueError(
                f"rope must rotate its whole head (the qk_rope_head_dim slice), but its "
                f"rotary_dim is {rope.config.rotary_dim} of head_dim {rope.head_dim}"
            )
        self.qk_nope_head_dim = qk_nope_head_dim
        self.rope = rope

    @property
    def qk_rope_head_dim(self) -> int:
        return self.rope.head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """``qk_head_dim ** -0.5``, times ``yarn_mscale(factor, mscale_all_dim) ** 2`` under
        a YaRN scaling with ``mscale_all_dim`` (:func:`~posenc.functional.latent.
        mla_softmax_scale`); YaRN's attention factor on cos and sin is the RoPE's own."""
        scaling = self.rope.scaling
        if isinstance(scaling, YarnScaling):
            return mla_softmax_scale(self.qk_head_dim, scaling.factor, scaling.mscale_all_dim)
        return mla_softmax_scale(self.qk_head_dim)

    def forward(
        self,
        q: torch.Tensor,
        k_rope: torch.Tensor,
        k_nope: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        k_positions: torch.Tensor | None = None,
        seq_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q's rope slice by ``positions`` and ``k_rope`` by ``k_positions``, and join
        the slices into query and key heads.

        Positions default as :class:`~posenc.rotary.RoPE`'s do: the queries are the last
        ``q_len`` of the ``k_len`` keys; ``seq_len`` is for length-dependent scalings.

        Returns:
            ``(q, k)``, both ``[batch, heads, len, qk_head_dim]``: ``q``'s nope slice as
            given, every head of ``k`` with the same rotated ``k_rope``.
        """
        self._check(q, k_rope, k_nope)
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        q_rope, k_rope = self.rope(
            q_rope, k_rope, positions=positions, k_positions=k_positions, seq_len=seq_len
        )
        return join_latent_heads(q_nope, q_rope, k_nope, k_rope)

    def _check(self, q: torch.Tensor, k_rope: torch.Tensor, k_nope: torch.Tensor) -> None:
        """Raise naming the tensor whose type or shape is not the one documented."""
        for name, t in (("q", q), ("k_rope", k_rope), ("k_nope", k_nope)):
            check_float_tensor(name, t)
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
            if t.dtype != q.dtype:
                raise TypeError(f"{name} is {t.dtype} but q is {q.dtype}: give one dtype")
            if t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q on {q.device}: give one device")
        b, h = q.shape[:2]
        expected = {
            "q": (b, h, q.shape[2], self.qk_head_dim),
            "k_rope": (b, 1, k_rope.shape[2], self.qk_rope_head_dim),
            "k_nope": (b, h, k_rope.shape[2], self.qk_nope_head_dim),
        }
        for name, t in (("q", q), ("k_rope", k_rope), ("k_nope", k_nope)):
            if tuple(t.shape) != expected[name]:
                raise ValueError(
                    f"{name} must be {expected[name]} ([batch, heads, len, dim] with "
                    f"qk_nope_head_dim={self.qk_nope_head_dim}, qk_rope_head_dim="
                    f"{self.qk_rope_head_dim}, one shared k_rope head), got {tuple(t.shape)}"
                )

    def extra_repr(self) -> str:
        return f"qk_nope_head_dim={self.qk_nope_head_dim}, softmax_scale={self.softmax_scale:.6g}"
