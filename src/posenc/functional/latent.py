"""Multi-head latent attention's decoupled RoPE (DeepSeek-AI 2024, "DeepSeek-V2",
arXiv:2405.04434, section 2.1.3): the two steps that are not a rotation.

Latent attention compresses the keys into a low-rank latent that a RoPE cannot pass through,
so position rides on a separate slice: each query head is ``[q_nope | q_rope]`` and each key
head ``[k_nope | k_rope]``, where ``k_rope`` is one rotated slice shared by every head. The
rotation itself is :func:`~posenc.functional.rope.apply_rope` on the ``rope`` slices; this
module joins the slices into ordinary heads and gives the softmax scale, which under YaRN
also carries DeepSeek's ``mscale_all_dim`` temperature (squared: it scales q and k alike).
"""

from __future__ import annotations

import torch

from ..arguments import check_devices, check_float, check_int, check_tensor
from .rope_scaling import yarn_mscale

__all__ = ["join_latent_heads", "mla_softmax_scale"]


def mla_softmax_scale(
    qk_head_dim: int, factor: float | None = None, mscale_all_dim: float | None = None
) -> float:
    """The softmax scale of latent attention: ``qk_head_dim ** -0.5``, times
    ``yarn_mscale(factor, mscale_all_dim) ** 2`` when ``mscale_all_dim`` is set (not 0 or
    None: DeepSeek's configs write 0 for absent).

    ``qk_head_dim`` is the whole head, ``qk_nope_head_dim + qk_rope_head_dim``; ``factor``
    the YaRN factor (``yarn_mscale`` is 1 for ``factor <= 1``).

    Example:
        >>> round(mla_softmax_scale(192, factor=40.0, mscale_all_dim=1.0), 6)
        0.135234
        >>> mla_softmax_scale(16) == 16 ** -0.5
        True
    """
    check_int("qk_head_dim", qk_head_dim)
    if factor is not None:
        check_float("factor", factor)
    if mscale_all_dim is not None:
        check_float("mscale_all_dim", mscale_all_dim, positive=False)
        if mscale_all_dim < 0:
            raise ValueError(f"mscale_all_dim must be >= 0 (0: absent), got {mscale_all_dim}")
    scale = qk_head_dim**-0.5
    if not mscale_all_dim:
        return scale
    if factor is None:
        raise ValueError("mscale_all_dim needs the YaRN factor: pass factor")
    mscale = yarn_mscale(factor, mscale_all_dim)
    return scale * mscale * mscale  # in this order, as DeepSeek's code rounds it


def join_latent_heads(
    q_nope: torch.Tensor, q_rope: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Join the position-free and the rotated slices into query and key heads, the one
    shared ``k_rope`` slice broadcast to every head.

    Shapes:
        q_nope ``[batch, heads, q_len, d_nope]``, q_rope ``[batch, heads, q_len, d_rope]``,
        k_nope ``[batch, heads, k_len, d_nope]``, k_rope ``[batch, 1, k_len, d_rope]`` ->
        q ``[batch, heads, q_len, d_nope + d_rope]``, k ``[batch, heads, k_len, d_nope +
        d_rope]``.

    Example:
        >>> import torch
        >>> q, k = join_latent_heads(torch.zeros(1, 4, 3, 8), torch.ones(1, 4, 3, 2),
        ...     torch.zeros(1, 4, 5, 8), torch.ones(1, 1, 5, 2))
        >>> tuple(q.shape), tuple(k.shape), bool((k[..., 8:] == 1).all())
        ((1, 4, 3, 10), (1, 4, 5, 10), True)
    """
    named = {"q_nope": q_nope, "q_rope": q_rope, "k_nope": k_nope, "k_rope": k_rope}
    for name, value in named.items():
        check_tensor(name, value, dims=(4,))
    check_devices(**named)
    if q_nope.shape[:-1] != q_rope.shape[:-1]:
        raise ValueError(
            f"q_nope and q_rope must share [batch, heads, q_len], got {tuple(q_nope.shape)} "
            f"and {tuple(q_rope.shape)}"
        )
    b, _, k_len, _ = k_nope.shape
    if k_rope.shape[0] != b or k_rope.shape[1] != 1 or k_rope.shape[2] != k_len:
        raise ValueError(
            f"k_rope must be [batch, 1, k_len, d_rope] = [{b}, 1, {k_len}, d_rope] beside "
            f"k_nope {tuple(k_nope.shape)}, got {tuple(k_rope.shape)}"
        )
    q = torch.cat((q_nope, q_rope), dim=-1)
    # [b, 1, k_len, d_rope] -> [b, heads, k_len, d_rope]: a view, every head the same slice
    k_rope = k_rope.expand(*k_nope.shape[:-1], k_rope.shape[-1])
    return q, torch.cat((k_nope, k_rope), dim=-1)
