"""Case 2: one RoPE decode step at position 100 against position 100,000.

RoPE's cost must not depend on how far the position is: posenc derives the angles from
the positions each forward (no table sized by the longest position). To see only the
position, both steps attend over caches of the same length: each cache is filled with
``prefix`` tokens whose positions end just before the step's (``p - prefix .. p - 1``), then
each timed round decodes one token at the next position of its cache (``p, p + 1, ...``),
so the caches grow alike.

Two rows: a whole :class:`~posenc.models.TransformerLM` step with its
:class:`~posenc.attn.cache.KVCache` (explicit positions), and the RoPE part alone (tables for
one position, q and k of one token rotated). The floor is the step at the near position; the
far step's ``x_floor`` should be 1: the cost of a step does not depend on the position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from ..base import RotaryEncoding
from ..models import TransformerLM
from ..registry import create
from .timing import interleaved, row

__all__ = ["run"]


def _model_step(model: TransformerLM, position: int, prefix: int, steps: int):
    """A callable decoding one token per call, after a prefill ending at ``position - 1``."""
    cache = model.new_cache(1, prefix + steps)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.vocab_size, (1, prefix), generator=gen)
    with torch.no_grad():
        model(prompt, positions=torch.arange(position - prefix, position)[None], cache=cache)
    token = torch.zeros(1, 1, dtype=torch.long)
    state = {"next": position}

    def step():
        with torch.no_grad():
            out = model(token, positions=torch.tensor([[state["next"]]]), cache=cache)
        state["next"] += 1
        return out

    return step


def _rope_step(head_dim: int, heads: int, position: int):
    """The RoPE part of a step: tables for one position, one token's q and k rotated."""
    rope = cast(RotaryEncoding, create("rope", head_dim=head_dim))
    q, k = torch.randn(2, 1, heads, 1, head_dim).unbind(0)
    where = torch.tensor([position])

    def step():
        tables = rope.rotation(where)
        return rope.rotate(q, tables), rope.rotate(k, tables, key=True)

    return step


def run(
    positions: Sequence[int] = (100, 100_000),
    dim: int = 256,
    n_layers: int = 4,
    n_heads: int = 8,
    prefix: int = 64,
    repeat: int = 20,
    warmup: int = 3,
) -> list[dict[str, Any]]:
    """Two records (model step, RoPE step); implementations ``pos <p>`` for each position,
    the first one the floor."""
    if len(positions) < 2 or any(p < prefix for p in positions):
        raise ValueError(f"positions must be >= 2 positions each >= prefix ({prefix})")
    torch.manual_seed(0)
    model = TransformerLM(256, dim, n_layers, n_heads, encoding="rope").eval()
    names = [f"pos {p}" for p in positions]
    steps = warmup + repeat
    model_impls: dict[str, Callable[[], Any]] = {
        name: _model_step(model, p, prefix, steps) for name, p in zip(names, positions, strict=True)
    }
    head_dim = dim // n_heads
    rope_impls: dict[str, Callable[[], Any]] = {
        name: _rope_step(head_dim, n_heads, p) for name, p in zip(names, positions, strict=True)
    }
    config = {"dim": dim, "n_layers": n_layers, "n_heads": n_heads, "cached": prefix}
    return [
        row(
            {"step": "TransformerLM", **config},
            interleaved(model_impls, repeat=repeat, warmup=warmup),
            names[0],
        ),
        row(
            {"step": "rope tables + rotate", "head_dim": head_dim, "heads": n_heads},
            interleaved(rope_impls, repeat=repeat, warmup=warmup),
            names[0],
        ),
    ]
