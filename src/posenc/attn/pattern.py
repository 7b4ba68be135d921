"""Which keys a query sees: the causal order, a sliding window or a chunk, by position.

:class:`AttnPattern` is the part of the mask that modern models set per layer, decided by
the positions of query and key (as the causal mask is, so explicit positions, packed
documents and KV caches follow it with nothing else to do):

- ``window=W``, causal: a query at position ``i`` sees keys ``j`` with ``i - W < j <= i``,
  the last ``W`` positions including its own (Mistral 7B, Jiang et al. 2023,
  arXiv:2310.06825; Gemma 2/3's local layers; gpt-oss's banded layers);
- ``window=W``, not causal: ``|i - j| <= W // 2`` (ModernBERT's local attention, Warner et
  al. 2024, arXiv:2412.13663);
- ``chunk=C``: ``i // C == j // C``, with the causal order when causal (Llama 4's chunked
  attention, 8,192 tokens).

:meth:`AttnPattern.visible` is one elementwise rule on position tensors, so the dense mask
(broadcast ``[q, 1]`` against ``[1, k]``) and flex attention's ``mask_mod`` (scalars per
score) read the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..config import check_int

__all__ = [
    "FULL",
    "PLAIN",
    "PLAIN_TRAITS",
    "AttnPattern",
    "ScoreOptions",
    "ScoreTraits",
    "check_sinks",
    "check_softcap",
    "pattern_mask",
]


@dataclass(frozen=True)
class AttnPattern:
    """A sliding window or a chunk (or neither: every causal key, or every key).

    Attributes:
        window: the window size ``W >= 1``, or None.
        chunk: the chunk size ``C >= 1``, or None; not with ``window``.

    Example:
        >>> p = AttnPattern(window=2)
        >>> q, k = torch.arange(4)[:, None], torch.arange(4)[None, :]
        >>> p.visible(q, k, causal=True).int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """

    window: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        if self.window is not None:
            check_int("window", self.window)
        if self.chunk is not None:
            check_int("chunk", self.chunk)
        if self.window is not None and self.chunk is not None:
            raise ValueError(
                f"window ({self.window}) and chunk ({self.chunk}) are two patterns: give one"
            )

    @property
    def local(self) -> bool:
        """Whether a window or chunk hides keys beyond the causal mask."""
        return self.window is not None or self.chunk is not None

    def visible(
        self, q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool
    ) -> torch.Tensor | None:
        """True where a query at ``q_pos`` sees a key at ``k_pos`` (broadcast together);
        None when every key is seen (not causal, no window, no chunk)."""
        seen = None
        if causal:
            seen = k_pos <= q_pos
        if self.window is not None:
            if causal:
                near = k_pos > q_pos - self.window
            else:
                near = (q_pos - k_pos).abs() <= self.window // 2
            seen = near if seen is None else seen & near
        if self.chunk is not None:
            same = torch.div(q_pos, self.chunk, rounding_mode="floor") == torch.div(
                k_pos, self.chunk, rounding_mode="floor"
            )
            seen = same if seen is None else seen & same
        return seen

    def describe(self) -> str:
        """``"window 128"``, ``"chunk 8192"`` or ``"full"``."""
        if self.window is not None:
            return f"window {self.window}"
        if self.chunk is not None:
            return f"chunk {self.chunk}"
        return "full"


#: no window and no chunk: every causal key (or every key)
FULL = AttnPattern()


def pattern_mask(
    pattern: AttnPattern, q_positions: torch.Tensor, k_positions: torch.Tensor, causal: bool
) -> torch.Tensor | None:
    """The dense form of :meth:`AttnPattern.visible`: True where a query sees a key.

    Shapes:
        q_positions ``[q_len]`` or ``[batch, q_len]``; k_positions ``[k_len]`` or
        ``[batch, k_len]`` -> ``[q_len, k_len]`` or ``[batch, 1, q_len, k_len]``, or None
        when every key is seen.
    """
    seen = pattern.visible(q_positions.unsqueeze(-1), k_positions.unsqueeze(-2), causal)
    if seen is not None and seen.dim() == 3:
        seen = seen.unsqueeze(-3)  # [b, 1, q, k]: one mask for every head
    return seen


@dataclass(frozen=True, eq=False)
class ScoreOptions:
    """What one attention call does to its scores beyond the encoding: the pattern, the
    soft cap and the sinks (checked by :func:`posenc.attention`).

    Attributes:
        pattern: the window or chunk.
        softcap: scores become ``softcap * tanh(s / softcap)``, or None.
        sinks: ``[heads]`` logits that join the softmax and read no value, or None.
    """

    pattern: AttnPattern = FULL
    softcap: float | None = None
    sinks: torch.Tensor | None = None

    def traits(self, finite: bool = True) -> ScoreTraits:
        """What the backend choice reads of these options (whether sinks are given, not
        their values), with whether the keys and values are ``finite``."""
        return ScoreTraits(self.pattern, self.softcap, self.sinks is not None, finite)


#: no pattern, no cap, no sinks
PLAIN = ScoreOptions()


class ScoreTraits(NamedTuple):
    """What the backend choice (:func:`~posenc.attn.bias_plan.plan_bias`,
    :func:`~posenc.attn.backends.plan_plain`) reads of a call beyond its sizes, positions
    and masks; hashable, so a model keys its shared bias tables by it.

    Attributes:
        pattern: the window or chunk (a local one counts as a mask).
        softcap: the soft cap, or None.
        sinks: whether sinks are given.
        finite: whether every key and value is finite (else only ``math`` runs the call).
    """

    pattern: AttnPattern = FULL
    softcap: float | None = None
    sinks: bool = False
    finite: bool = True

    @property
    def modified(self) -> bool:
        """Whether the scores or the softmax change (softcap, sinks): fused SDPA cannot."""
        return self.softcap is not None or self.sinks


#: a call with no pattern, cap or sinks, whose keys and values are finite
PLAIN_TRAITS = ScoreTraits()


def check_softcap(softcap: float | None) -> float | None:
    """Raise unless ``softcap`` is None or a finite number > 0."""
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a number or None, got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap must be a finite number > 0, got {softcap}")
    return float(softcap)


def check_sinks(sinks: torch.Tensor | None, heads: int, device: torch.device) -> None:
    """Raise unless ``sinks`` is None or a floating-point ``[heads]`` tensor on ``device``."""
    if sinks is None:
        return
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
        got = sinks.dtype if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise TypeError(f"sinks must be a floating-point tensor, got {got}")
    if tuple(sinks.shape) != (heads,):
        raise ValueError(
            f"sinks must be one logit per query head, [{heads}], got {tuple(sinks.shape)}"
        )
    if sinks.device != device:
        raise ValueError(f"sinks is on {sinks.device} but q is on {device}: move sinks there")
