"""``dca``: Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of
Large Language Models", arXiv:2402.17463), the RoPE plan of Qwen2.5-7B/14B-Instruct-1M
(``dual_chunk_attention_config``: chunk 262144, local 8192), which reaches 1M tokens
without training.

Keys turn by their place in their chunk; a query turns three ways, one per region of keys
(its chunk, the chunk before, every earlier one), so that no query-key distance exceeds
the trained length (:mod:`posenc.functional.dca` has the maps). Attention is one softmax
over the three regions: :func:`posenc.attention` runs it
(:mod:`posenc.attn.dual_chunk`), and :class:`~posenc.models.TransformerLM` layers with
``dca`` hand it their unrotated queries and keys.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from ..config import check_int
from ..functional.dca import dca_chunk_len, dca_key_positions, dca_query_positions
from ..registry import register
from .rope import RoPE, RopeConfig

__all__ = ["DualChunkRoPE"]


@dataclasses.dataclass(frozen=True)
class DualChunkConfig(RopeConfig):
    """Configuration of :class:`DualChunkRoPE`: :class:`~posenc.rotary.rope.RopeConfig`
    (base, layout, partial rotary; no scaling) with the chunks.

    Attributes:
        chunk_size: C, the longest distance attention may see (Qwen2.5-1M: 262144, its
            trained length; vLLM's default 8192).
        local_size: w, the stretch of the chunk before over which a query keeps its true
            distances (Qwen2.5-1M: 8192; vLLM's default 1024). Chunks are ``C − w`` long.
        original_max_position_embeddings: L₀, past which q and k are tempered by
            ``0.1 · ln(n / L₀) + 1`` at ``n`` tokens (Qwen2.5-1M: 262144), or None.
    """

    chunk_size: int = 8192
    local_size: int = 1024
    original_max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scaling.rope_type != "default":
            raise ValueError(
                f"dca takes no scaling (got rope_type {self.scaling.rope_type!r}): its chunks "
                "are its context extension, and the engines rotate with the plain base"
            )
        check_int("chunk_size", self.chunk_size, minimum=2)
        check_int("local_size", self.local_size, minimum=0)
        if self.local_size >= self.chunk_size:
            raise ValueError(
                f"local_size ({self.local_size}) must be below chunk_size ({self.chunk_size}): "
                "chunks are chunk_size - local_size positions long"
            )
        if self.original_max_position_embeddings is not None:
            check_int("original_max_position_embeddings", self.original_max_position_embeddings)


@register(
    "dca",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="An et al. 2024, Dual Chunk Attention, arXiv:2402.17463 (Qwen2.5-1M)",
    summary="RoPE in chunks: each query turns three ways, no distance past the trained length",
    formula=(
        "s = C − w;  key j turns by j mod s;  query i by i mod s (keys of its chunk),\n"
        "min(i mod s + s, C) (the chunk before), min(2s − 1, C) (earlier chunks);\n"
        "one softmax over the three regions; past L₀, q and k times 0.1·ln(n/L₀) + 1"
    ),
)
class DualChunkRoPE(RoPE):
    """Dual Chunk Attention's rotations.

    :meth:`rotation` and ``enc(q, k)`` turn by the positions within the chunk (``p mod
    s``): the keys' rotation, and the queries' against keys of their own chunk. Attention
    across chunks needs the queries' other two rotations (:meth:`query_rotations`), which
    :func:`posenc.attention` applies (``merges_attention``).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]`` -> rotated q, k of the same shapes.

    Example:
        >>> import torch, posenc
        >>> dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
        >>> q, k, v = torch.randn(3, 1, 2, 20, 16).unbind(0)
        >>> posenc.attention(q, k, v, dca).shape  # three chunks of 8
        torch.Size([1, 2, 20, 16])
    """

    Config = DualChunkConfig
    config: DualChunkConfig
    merges_attention: ClassVar[bool] = True
    #: chunks are cut at whole positions
    integer_positions = True

    @property
    def chunk_len(self) -> int:
        """``s = chunk_size − local_size``, the length of a chunk."""
        return dca_chunk_len(self.config.chunk_size, self.config.local_size)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """``(cos, sin)`` at the positions within the chunk, ``p mod s``: the keys'
        rotation. ``seq_len`` changes nothing (no scaling) but is checked. Shapes: as
        :meth:`RoPE.rotation <posenc.rotary.rope.RoPE.rotation>`."""
        positions = self.check_positions(positions)
        c = self.config
        keys = dca_key_positions(positions, c.chunk_size, c.local_size)
        return super().rotation(keys, seq_len)

    def query_rotations(self, positions: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], ...]:
        """The queries' three ``(cos, sin)``, against the keys of their chunk, of the chunk
        before, and of earlier chunks (:func:`~posenc.functional.dca.dca_query_positions`).
        """
        positions = self.check_positions(positions)
        c = self.config
        maps = dca_query_positions(positions, c.chunk_size, c.local_size)
        return tuple(RoPE.rotation(self, p) for p in maps)
