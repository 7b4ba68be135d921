"""Multimodal RoPE (M-RoPE; Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191).

Every token has three position ids, temporal, height and width (t, h, w): ``[3, ..., seq]``.
The n rotary pairs are shared out between the three axes by ``mrope_section = (s_t, s_h,
s_w)``, ``s_t + s_h + s_w = n``, and pair i rotates by ``p_a(i) · θ_i``, the position on its
own axis ``a(i)`` times its usual RoPE frequency. Two ways of sharing out exist:

- sectioned (Qwen2-VL, Qwen2.5-VL): the first ``s_t`` pairs follow t, the next ``s_h`` h,
  the last ``s_w`` w; so the low frequencies carry the spatial axes only;
- interleaved (Qwen3-VL; Bai et al. 2025, arXiv:2511.21631): pairs cycle t, h, w, t, h, w,
  ...: pair i follows h when ``i % 3 == 1`` and ``i < 3 s_h``, w when ``i % 3 == 2`` and
  ``i < 3 s_w``, t otherwise; every axis then spans the whole frequency range.

Balanced (openPangu-VL; vLLM's ``MRotaryEmbeddingInterleaved``) interleaves by the share
of each axis's pairs placed so far, one temporal pair last (:func:`balanced_mrope_axis`).

Spatial first (ERNIE-4.5-VL; Baidu 2025, "ERNIE 4.5 Technical Report") puts the temporal
pairs last, the low frequencies: sectioned, the first ``s_h`` pairs follow h, the next
``s_w`` w, the last ``s_t`` t; interleaved, the first ``s_h + s_w`` pairs alternate h, w, h,
w, ... (``s_h = s_w``) and the last ``s_t`` follow t.

XD-RoPE (Tencent's Hunyuan-VL and HunyuanOCR; vLLM's ``XDRotaryEmbedding``) shares the
pairs out in four consecutive sections instead, over four ids ``[4, ..., seq]``: the
sequence position, then an image token's width and height in its grid and the image's
index (text tokens: the sequence position on all four).

Text tokens have equal ids on the three axes, so for text M-RoPE is plain 1-D RoPE. The
pairs are the pairs of the RoPE layout (``half`` in Hugging Face's Qwen models); sharing
out acts on pair indices and is the same in either layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..arguments import check_bool, check_device, check_int, check_movable, check_tensor
from .rope import rope_cos_sin

__all__ = [
    "MROPE_AXES",
    "balanced_mrope_axis",
    "check_mrope_section",
    "default_mrope_section",
    "mrope_axis",
    "mrope_cos_sin",
]

#: the three position axes of M-RoPE, in the order of ``[3, batch, seq]`` position ids
MROPE_AXES = ("temporal", "height", "width")


def default_mrope_section(n_pairs: int, interleaved: bool = False) -> tuple[int, int, int]:
    """The published split of ``n_pairs`` rotary pairs, scaled to any number of pairs.

    Sectioned: Qwen2-VL's [16, 24, 24] of 64 pairs, ``s_h = s_w = max(1, floor(3n/8))``;
    interleaved: Qwen3-VL's [24, 20, 20], ``s_h = s_w = max(1, floor(5n/16))``; ``s_t`` takes
    the rest. Raises ``ValueError`` for fewer than 3 pairs (an axis would get none).

    Example:
        >>> default_mrope_section(64), default_mrope_section(64, interleaved=True)
        ((16, 24, 24), (24, 20, 20))
        >>> default_mrope_section(8), default_mrope_section(4)
        ((2, 3, 3), (2, 1, 1))
    """
    check_int("n_pairs", n_pairs)
    check_bool("interleaved", interleaved)
    spatial = max(1, (5 * n_pairs) // 16 if interleaved else (3 * n_pairs) // 8)
    section = (n_pairs - 2 * spatial, spatial, spatial)
    if min(section) < 1:
        raise ValueError(
            f"n_pairs={n_pairs} rotary pairs are too few for the default M-RoPE split over "
            f"three axes (it gives {list(section)}); pass mrope_section explicitly"
        )
    return section


def check_mrope_section(
    section: Sequence[int], n_pairs: int, interleaved: bool = False, spatial_first: bool = False
) -> None:
    """Raise unless ``section`` is three ints >= 0 (four, sectioned: XD-RoPE) that share
    out ``n_pairs`` pairs."""
    check_int("n_pairs", n_pairs)
    _check_section(section, interleaved, spatial_first)
    if sum(section) != n_pairs:
        raise ValueError(
            f"mrope_section {list(section)} sums to {sum(section)}, but there are {n_pairs} "
            f"rotary pairs (rotary_dim / 2): the sections must add up to them"
        )
    if interleaved and spatial_first:
        if section[1] != section[2]:
            raise ValueError(
                f"interleaved spatial-first mrope_section {list(section)} alternates height "
                "and width pairs: they must be as many (s_h == s_w)"
            )
    elif interleaved:
        # h takes pairs 1, 4, ..., 3 s_h - 2 and w takes 2, 5, ..., 3 s_w - 1: they must exist
        _, s_h, s_w = section
        if 3 * s_h - 2 >= n_pairs or 3 * s_w - 1 >= n_pairs:
            raise ValueError(
                f"interleaved mrope_section {list(section)} needs pairs up to index "
                f"{max(3 * s_h - 2, 3 * s_w - 1)}, but there are only {n_pairs} pairs"
            )


def _check_section(section: Sequence[int], interleaved: bool, spatial_first: bool) -> None:
    """Raise unless ``section`` is three ints >= 0, or four in sections (XD-RoPE), and the
    switches are bools."""
    check_bool("interleaved", interleaved)
    check_bool("spatial_first", spatial_first)
    if not isinstance(section, (tuple, list)) or (
        len(section) != 3 and not (len(section) == 4 and not interleaved and not spatial_first)
    ):
        raise ValueError(
            "mrope_section must be three ints (temporal, height, width pairs), or four in "
            f"sections (XD-RoPE: sequence, width, height, image pairs), got {section!r}"
        )
    for s in section:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"mrope_section must hold ints, got {section!r}")
        if s < 0:
            raise ValueError(f"mrope_section entries must be >= 0, got {list(section)}")


def mrope_axis(
    section: Sequence[int],
    interleaved: bool = False,
    device: torch.device | str | None = None,
    spatial_first: bool = False,
) -> torch.Tensor:
    """The axis (0 temporal, 1 height, 2 width) whose position rotates each pair; with
    four sections (XD-RoPE), axis ``a`` for the pairs of section ``a``.

    Shapes:
        returns ``[sum(section)]``, int64

    Example:
        >>> mrope_axis((2, 3, 3)).tolist()
        [0, 0, 1, 1, 1, 2, 2, 2]
        >>> mrope_axis((4, 2, 2), interleaved=True).tolist()
        [0, 1, 2, 0, 1, 2, 0, 0]
        >>> mrope_axis((2, 2, 2), interleaved=True, spatial_first=True).tolist()
        [1, 2, 1, 2, 0, 0]
        >>> mrope_axis((1, 2, 2, 1)).tolist()
        [0, 1, 1, 2, 2, 3]
    """
    _check_section(section, interleaved, spatial_first)
    check_mrope_section(section, sum(section), interleaved, spatial_first)
    device = check_device(device)
    pair = torch.arange(sum(section), device=device)
    if len(section) == 4:  # XD-RoPE: four axes in consecutive sections
        ends = torch.tensor(section, device=device).cumsum(0)[:-1]
        return (pair.unsqueeze(-1) >= ends).sum(-1)
    s_t, s_h, s_w = section
    if spatial_first:  # h and w (in blocks or alternating), then the temporal pairs
        spatial = pair < s_h + s_w
        width = (pair % 2 == 1) if interleaved else (pair >= s_h)
        return torch.where(spatial, 1 + width.long(), 0)
    if not interleaved:  # s_t temporal pairs, then s_h height pairs, then s_w width pairs
        return (pair >= s_t).long() + (pair >= s_t + s_h).long()
    height = (pair % 3 == 1) & (pair < 3 * section[1])
    width = (pair % 3 == 2) & (pair < 3 * section[2])
    return height.long() + 2 * width.long()


def balanced_mrope_axis(section: Sequence[int]) -> torch.Tensor:
    """openPangu-VL's interleave (vLLM's ``MRotaryEmbeddingInterleaved``): one temporal
    pair kept for the last; the others placed one at a time, each the axis that has placed
    the smallest share of its pairs so far (ties to the lower axis), never the same axis
    twice running while another has pairs left.

    Shapes:
        returns ``[sum(section)]``, int64

    Example:
        >>> balanced_mrope_axis((3, 2, 2)).tolist()
        [0, 1, 2, 0, 1, 2, 0]
        >>> balanced_mrope_axis((4, 1, 1)).tolist()
        [0, 1, 2, 0, 0, 0]
    """
    total = [section[0] - 1, section[1], section[2]]  # one temporal pair saved for the end
    placed, order, last = [0, 0, 0], [], -1
    for _ in range(sum(total)):
        left = [a for a in range(3) if placed[a] < total[a]]
        choices = [a for a in left if a != last] or left
        last = min(choices, key=lambda a: (placed[a] / total[a], a))
        placed[last] += 1
        order.append(last)
    return torch.tensor([*order, 0])


def mrope_cos_sin(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    axis: torch.Tensor,
    attention_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of M-RoPE's angles ``p_{axis[i]} · inv_freq[i]``, in float32.

    The angles of each axis come from :func:`~posenc.functional.rope_cos_sin` (float64
    angles, rounded once; float64 positions keep float64), then each pair takes the value
    of its own axis, which is exact.

    Args:
        positions: ``[3, seq]`` or ``[3, batch, seq]`` (temporal, height, width ids; four
            axes for XD-RoPE), one per axis of ``axis``.
        inv_freq: the per-pair frequencies θ_i.
        axis: the axis of each pair, :func:`mrope_axis`.
        attention_factor: multiplies cos and sin (YaRN's temperature), as in RoPE.

    Shapes:
        positions ``[3, *s]``, inv_freq ``[n]``, axis ``[n]`` -> cos, sin ``[*s, n]``

    Example:
        >>> from posenc.functional import rope_cos_sin, rope_inv_freq
        >>> inv_freq, _ = rope_inv_freq(16)
        >>> text = torch.arange(5).expand(3, 1, 5)  # equal ids: M-RoPE is RoPE
        >>> cos, sin = mrope_cos_sin(text, inv_freq, mrope_axis((2, 3, 3)))
        >>> torch.equal(cos, rope_cos_sin(torch.arange(5), inv_freq)[0].expand(1, 5, 8))
        True
    """
    check_tensor("positions", positions, kinds=("int", "float"), dims=(2, 3))
    if positions.shape[0] not in (3, 4):
        raise ValueError(
            "positions must be [3, seq] or [3, batch, seq] (XD-RoPE: [4, seq] or [4, batch, "
            f"seq]), got shape {tuple(positions.shape)}"
        )
    check_tensor("axis", axis, kinds=("int",), dims=(1,))
    check_tensor("inv_freq", inv_freq, dims=(1,))
    if axis.shape != inv_freq.shape:
        raise ValueError(
            f"axis must give one axis per pair of inv_freq, got {axis.shape[0]} axes for "
            f"{inv_freq.shape[0]} pairs"
        )
    check_movable("axis", axis, positions.device)
    cos, sin = rope_cos_sin(positions, inv_freq, attention_factor)  # [3, *s, n] each
    index = axis.to(positions.device).expand(cos.shape[1:]).unsqueeze(0)  # [1, *s, n]
    return cos.gather(0, index).squeeze(0), sin.gather(0, index).squeeze(0)
