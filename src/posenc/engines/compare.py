"""How far an engine's rotation is from posenc's float64 one: the probe positions, the
float32 tolerance, and what a disagreement is on.

An engine's rotation of one RoPE layer type is its ``(cos, sin)`` per rotary pair at each
probe position, the attention factor included (transformers and vLLM multiply their tables
by it, as posenc does). The reference is posenc's reading of the config, its angles
``p·θ_i`` formed in float64 and reduced modulo 2π (:func:`reference_tables`).

An engine that forms ``p·θ_i`` in float32 is off by up to ``|p·θ_i|·2^-24`` radians (the
product's rounding; ``θ_i`` itself rounded to float32 adds as much again), and its cos and
sin by a few float32 ulps: :func:`fp32_tolerance` is that bound, and the first position
past it is where an engine stops computing what posenc computes, however it rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..arguments import MAX_POSITION
from ..functional.rope import rope_angles
from ..rotary.dca import DualChunkRoPE
from ..rotary.rope import RoPE

__all__ = [
    "Answer",
    "Comparison",
    "Job",
    "check_past",
    "compare_tables",
    "fp32_tolerance",
    "pair_count",
    "probe_positions",
    "reference_tables",
]

EPS32 = 2.0**-24

#: one comparison to make: posenc's rope of a layer type, the positions, the layer type
Job = tuple[RoPE, torch.Tensor, str | None]
#: an engine's answer to a job: its ``(cos, sin)`` per pair, what it ran and the positions
#: it ran (all of the job's, or those within the engine's tables), or why it did not
Answer = tuple[tuple[torch.Tensor, torch.Tensor], str, torch.Tensor] | str


def probe_positions(context: int, past: float = 2.0, also: tuple[int, ...] = ()) -> torch.Tensor:
    """Positions spread over ``[0, context · past]``: the first few, every power of two,
    both sides of ``context`` and of each length in ``also`` (an original length, where
    the scalings that change there switch), and ``context · past``.

    Shapes:
        -> ``[n]`` int64, increasing, distinct.

    Example:
        >>> probe_positions(8, past=2.0).tolist()
        [0, 1, 2, 3, 4, 7, 8, 9, 16]
    """
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be an int >= 1 (tokens), got {context!r}")
    check_past(past)
    if context * past > MAX_POSITION:
        raise ValueError(
            f"past={past} probes position {context * past:.6g} (context {context} times "
            f"past), beyond 2**53 (MAX_POSITION), where float64 no longer holds every "
            "integer: give a smaller past"
        )
    last = max(context, int(context * past))
    points = {0, 1, 2, 3, last}
    for edge in (context, *also):
        points.update((edge - 1, edge, edge + 1))
    power = 4
    while power < last:
        points.add(power)
        power *= 2
    return torch.tensor(sorted(p for p in points if 0 <= p <= last))


def check_past(past: Any) -> None:
    """Raise unless ``past`` (how far past the context to probe, in contexts) is a finite
    number >= 1, naming it."""
    if not isinstance(past, (int, float)) or isinstance(past, bool) or not past >= 1:
        raise ValueError(f"past must be a number >= 1 (times the context), got {past!r}")
    if isinstance(past, float) and not math.isfinite(past):
        raise ValueError(f"past must be finite (times the context), got {past!r}")


def pair_count(rope: RoPE, positions: torch.Tensor) -> int:
    """How many pairs ``rope`` rotates in a sequence reaching the last of ``positions``."""
    return rope.inv_freq(int(positions.max()) + 1).numel()


def reference_tables(
    rope: RoPE, positions: torch.Tensor, seq_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """posenc's ``(cos, sin)`` of ``rope`` at ``positions``, float64, the attention factor
    included, for a sequence of ``seq_len`` tokens (the length-dependent scalings:
    ``dynamic``, ``longrope``; default: the last position + 1); a key's, for ``dca`` (its
    place in its chunk).

    Shapes:
        positions ``[n]`` -> cos, sin ``[n, pairs]`` float64.
    """
    seq_len = int(positions.max()) + 1 if seq_len is None else seq_len
    inv_freq = rope.inv_freq(seq_len)
    factor = rope.attention_factor(seq_len)
    if isinstance(rope, DualChunkRoPE):  # dca: a key turns by its place in its chunk
        positions = positions % rope.chunk_len
    angles = rope_angles(positions, inv_freq).double()
    return angles.cos() * factor, angles.sin() * factor


def fp32_tolerance(cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                   inv_freq: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The largest error of a float32 engine's ``(cos, sin)`` at each position: its angle
    ``p·θ_i`` off by ``2 · |p·θ_i| · 2^-24`` (θ_i and the product each rounded), then cos
    and sin, and the attention factor, off by a few ulps, times the table's magnitude.

    Shapes:
        cos, sin ``[n, pairs]``, positions ``[n]``, inv_freq ``[pairs]`` -> ``[n]``.
    """
    scale = torch.sqrt(cos.square() + sin.square()).amax(dim=-1)  # the attention factor
    angle = positions.double().unsqueeze(-1) * inv_freq.double()
    return scale * (2 * angle.amax(dim=-1) * EPS32 + 8 * EPS32)


@dataclass(frozen=True)
class Comparison:
    """One engine's tables against posenc's.

    Attributes:
        max_error: the largest ``|cos − cos_ref|`` or ``|sin − sin_ref|``.
        first_position: the first probe position whose error passes the float32
            tolerance, or None.
        differs_on: what differs: ``"attention factor (...)"`` (the tables' magnitudes),
            ``"frequencies of pairs a-b"`` (the angles of those pairs), or None.
    """

    max_error: float
    first_position: int | None
    differs_on: str | None


def compare_tables(
    got: tuple[torch.Tensor, torch.Tensor],
    ref: tuple[torch.Tensor, torch.Tensor],
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
) -> Comparison:
    """An engine's ``(cos, sin)`` against the reference at ``positions``.

    Shapes:
        got, ref: cos, sin ``[n, pairs]`` each; positions ``[n]``; inv_freq ``[pairs]``.
    """
    (cos, sin), (rcos, rsin) = (tuple(t.double() for t in pair) for pair in (got, ref))
    if cos.shape != rcos.shape:
        raise ValueError(
            f"the engine's tables are {tuple(cos.shape)}, posenc's {tuple(rcos.shape)}: "
            "a different number of rotary pairs"
        )
    error = torch.maximum((cos - rcos).abs(), (sin - rsin).abs())  # [n, pairs]
    over = error > fp32_tolerance(rcos, rsin, positions, inv_freq).unsqueeze(-1)
    if not bool(over.any()):
        return Comparison(float(error.max()), None, None)
    row = int(over.any(dim=-1).nonzero()[0, 0])
    return Comparison(
        float(error.max()), int(positions[row]), _differs_on(cos, sin, rcos, rsin, over)
    )


def _differs_on(cos, sin, rcos, rsin, over) -> str:
    """What differs: the magnitude (the attention factor) where it does at some position,
    else the angles of the pairs past the tolerance at some position (their frequencies).

    Shapes: ``[n, pairs]`` each."""
    got, ref = torch.sqrt(cos.square() + sin.square()), torch.sqrt(rcos.square() + rsin.square())
    off = ~torch.isclose(got, ref, rtol=1e-5, atol=0)
    if bool(off.any()):
        row = off.any(dim=-1).nonzero()[0, 0]
        engine, posenc = got[row].mean().item(), ref[row].mean().item()
        return f"attention factor (the engine's {engine:.6g}, posenc's {posenc:.6g})"
    bad = over.any(dim=0).nonzero().flatten().tolist()
    return (
        f"frequencies of pairs {bad[0]}-{bad[-1]}"
        if len(bad) > 1
        else f"frequency of pair {bad[0]}"
    )
