"""Multimodal RoPE (M-RoPE, Qwen2-VL): temporal, height and width sections of the pairs.

Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191; interleaved sections: Bai et al. 2025,
"Qwen3-VL", arXiv:2511.21631. Each token carries three position ids ``[3, batch, seq]``
(temporal, height, width), as :func:`posenc.positions.multimodal` builds them from token
ids and image/video grids; pair i rotates by its own axis's id times θ_i
(:mod:`posenc.functional.mrope`). Text tokens have the same id on all three axes, so plain
``[seq]`` or ``[batch, seq]`` positions are accepted too and rotate exactly as :class:`RoPE`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..config import check_tensor
from ..functional.mrope import (
    balanced_mrope_axis,
    check_mrope_section,
    default_mrope_section,
    mrope_axis,
    mrope_cos_sin,
)
from ..functional.rope import rope_cos_sin
from ..positions import check_batch, check_positions
from ..registry import register
from .rope import RoPE, RopeConfig, check_seq_len

__all__ = ["MRoPE"]


@dataclasses.dataclass(frozen=True)
class MRopeConfig(RopeConfig):
    """Configuration of :class:`MRoPE`: :class:`~posenc.rotary.rope.RopeConfig` plus the split.

    Attributes:
        mrope_section: pairs per axis (temporal, height, width), summing to the number of
            rotary pairs (``rotary_dim / 2``), each >= 0; Hugging Face's ``mrope_section``.
            Four sections are XD-RoPE (Hunyuan-VL, HunyuanOCR; vLLM's ``xdrope_section``):
            sequence, width, height and image-index ids ``[4, batch, seq]``, in
            consecutive sections.
            Default: the published split scaled to the pairs
            (:func:`~posenc.functional.mrope.default_mrope_section`): Qwen2-VL's
            ``[16, 24, 24]`` for 64 pairs (``s_h = s_w = max(1, floor(3n/8))``, e.g. ``[2, 1, 1]``
            for head_dim 8), Qwen3-VL's ``[24, 20, 20]`` when interleaved
            (``s_h = s_w = max(1, floor(5n/16))``). Stored as a tuple.
        mrope_interleaved: Qwen3-VL's layout: pairs cycle t, h, w instead of lying in three
            consecutive sections (Qwen2-VL, Qwen2.5-VL).
        mrope_spatial_first: the temporal pairs last (the lowest frequencies), after the
            height and width ones; with ``mrope_interleaved``, ERNIE-4.5-VL's ``h, w, h, w,
            ..., t, t, t`` (``s_h == s_w``).
        mrope_balanced: with ``mrope_interleaved``, openPangu-VL's interleave (vLLM's
            ``openpangu`` rope type): each pair goes to the axis that has placed the
            smallest share of its pairs, one temporal pair last
            (:func:`~posenc.functional.mrope.balanced_mrope_axis`).

    Scalings whose frequencies depend on the current length (``dynamic``, ``longrope``) are
    rejected: a ``[3, batch, seq]`` position tensor does not say which length applies.
    """

    mrope_section: Any = None
    mrope_interleaved: bool = False
    mrope_spatial_first: bool = False
    mrope_balanced: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mrope_interleaved", "mrope_spatial_first", "mrope_balanced"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.scaling.depends_on_length:
            raise ValueError(
                f"mrope does not support {self.scaling.rope_type!r} scaling: its frequencies "
                "depend on the current length, which M-RoPE position ids do not determine; "
                "use a fixed scaling (linear, ntk, yarn, llama3)"
            )
        inv_freq, _ = self.scaling.inv_freq(self.head_dim, self.rotary_dim, self.base, device="cpu")
        n_pairs = inv_freq.numel()
        section = self.mrope_section
        if section is None:
            if self.mrope_spatial_first:
                raise ValueError("mrope_spatial_first needs an explicit mrope_section")
            section = default_mrope_section(n_pairs, self.mrope_interleaved)
        # balanced: any split is placed (Qwen3-VL's interleave needs room for h and w)
        interleaved = self.mrope_interleaved and not self.mrope_balanced
        check_mrope_section(section, n_pairs, interleaved, self.mrope_spatial_first)
        if self.mrope_balanced and (
            not self.mrope_interleaved or self.mrope_spatial_first or len(section) != 3
        ):
            raise ValueError(
                "mrope_balanced (openPangu-VL's interleave) needs mrope_interleaved=True, "
                "three sections and no mrope_spatial_first"
            )
        if self.mrope_balanced and section[0] < 1:
            raise ValueError(
                f"mrope_balanced keeps a temporal pair last: s_t must be >= 1, got {section}"
            )
        object.__setattr__(self, "mrope_section", tuple(section))

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["mrope_section"] = list(self.mrope_section)
        return out


@register(
    "mrope",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="Wang et al. 2024, Qwen2-VL, arXiv:2409.12191",
    summary="RoPE whose pairs follow a token's temporal, height or width id; text is plain RoPE",
    formula=(
        "pair i of a token with ids (t, h, w) turns by p_a(i)·θ_i (RoPE, θ_i = base^(−2i/r))\n"
        "a(i) by mrope_section (s_t, s_h, s_w): the first s_t pairs follow t, the next s_h h,\n"
        "the last s_w w (mrope_interleaved: pairs cycle t, h, w; mrope_spatial_first: t last);\n"
        "text has t = h = w: plain RoPE"
    ),
)
class MRoPE(RoPE):
    """Multimodal rotary position embedding (Qwen2-VL, Qwen2.5-VL; Qwen3-VL interleaved).

    Pair i of a token with ids ``(p_t, p_h, p_w)`` rotates by ``p_{a(i)} · θ_i``, ``a(i)`` the
    axis its section gives it. Scores then depend on the differences of the three ids only,
    each axis through its own pairs. Frequencies, layout and scaling are those of
    :class:`~posenc.rotary.RoPE`; angles in float64, cos/sin rounded once to float32.

    Positions: ``[3, batch, seq]`` ids (Hugging Face's ``position_ids``; integer, or float
    for exact fractional times; batch may be 1), or text positions ``[seq]`` /
    ``[batch, seq]``, the same id on all three axes (a 2-D tensor is always text).
    Three-axis ids have no single token order, so attention masks them causally by token
    index (:meth:`causal_positions`).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``;
        ``rotation(positions)``: cos, sin ``[batch, seq, n]`` (``[seq, n]`` for ``[seq]``),
        n = rotary_dim / 2.

    Example:
        >>> import torch, posenc
        >>> from posenc.positions import multimodal
        >>> mrope = posenc.create("mrope", head_dim=16)
        >>> mrope.config.mrope_section
        (2, 3, 3)
        >>> ids = torch.tensor([[1, 2, 9, 9, 9, 9, 3]])  # text, a 4x4-patch image, text
        >>> positions, deltas = multimodal(
        ...     ids, torch.tensor([[1, 4, 4]]), image_token_id=9, video_token_id=8)
        >>> positions[:, 0].tolist()
        [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
        >>> q = k = torch.randn(1, 4, 7, 16)
        >>> q2, k2 = mrope(q, k, positions=positions)
        >>> text = torch.arange(7)  # text only: M-RoPE is RoPE
        >>> rope = posenc.create("rope", head_dim=16)
        >>> torch.equal(mrope(q, k, positions=text)[0], rope(q, k, positions=text)[0])
        True
    """

    Config = MRopeConfig
    config: MRopeConfig

    def check_positions(
        self,
        positions: torch.Tensor,
        *,
        seq_len: int | None = None,
        batch: int | None = None,
        name: str = "positions",
        device: torch.device | None = None,
    ) -> torch.Tensor:
        """Raise unless ``positions`` is ``[seq]``, ``[batch, seq]`` or ``[3, batch, seq]``
        (finite, >= 0, integer or float) for ``seq_len`` tokens and a batch of ``batch`` on
        ``device``; return them to compute with (integer dtypes as int64)."""
        positions = check_positions(
            positions, seq_len=seq_len, name=name, ndims=(1, 2, 3), device=device
        )
        axes = len(self.config.mrope_section)
        if positions.dim() == 3 and positions.shape[0] != axes:
            ids = (
                "[3, batch, seq] (temporal, height and width ids, e.g. "
                "posenc.positions.multimodal(...))"
                if axes == 3
                else "[4, batch, seq] (XD-RoPE: sequence, width, height and image ids)"
            )
            raise ValueError(
                f"{name} must be [seq] or [batch, seq] (text) or {ids}, "
                f"got shape {tuple(positions.shape)}"
            )
        if batch is not None:  # the batch of [3, batch, seq] ids is that of one axis
            check_batch(positions[0] if positions.dim() == 3 else positions, batch, name)
        return positions

    def causal_positions(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Text positions order the tokens; ``[3, batch, seq]`` ids do not (None). Raises
        ``TypeError``/``ValueError`` naming ``positions`` unless they are an integer or
        float tensor of 1 to 3 dimensions (a shape check: no value is read)."""
        check_tensor("positions", positions, kinds=("int", "float"), dims=(1, 2, 3))
        return None if positions.dim() == 3 else positions

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` float32 (float64 for float64 positions): ``[batch, seq, n]`` for
        ``[3, batch, seq]`` ids, ``positions.shape + (n,)`` for text positions. ``seq_len``
        changes nothing (no length-dependent scaling is allowed) but is checked."""
        check_seq_len(seq_len)
        positions = self.check_positions(positions)
        inv_freq, attention_factor = self._frequencies(None, positions.device)
        if positions.dim() != 3:  # text: the same id on every axis is plain RoPE
            return rope_cos_sin(positions, inv_freq, attention_factor)
        c = self.config
        if c.mrope_balanced:
            axis = balanced_mrope_axis(c.mrope_section)
        else:
            axis = mrope_axis(
                c.mrope_section, c.mrope_interleaved, spatial_first=c.mrope_spatial_first
            )
        return mrope_cos_sin(positions, inv_freq, axis.to(positions.device), attention_factor)
