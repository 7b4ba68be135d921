"""Case 1: RoPE applied to q and k ``[batch, heads, seq, head_dim]``, against its floor
and the peers.

Every implementation gets its tables (cos/sin or angles) computed once, before timing, as
a model does: :class:`~posenc.models.TransformerLM` computes them once per forward and
shares them across layers, so what is timed is the apply. posenc is timed through its
public ``RoPE.rotation`` (the tables) and ``RoPE.rotate``.

The floor is the least memory traffic the operation can do:

- forward: read q and k once and write them once (``q.clone(), k.clone()``);
- forward+backward: that, plus read the output gradients once and write the input
  gradients once (two more clones). Backward through ``clone`` itself would cost nothing
  (the gradient passes through unchanged), which is not the work a rotation has to do.

A forward+backward implementation runs the forward with q and k requiring grad and takes
``torch.autograd.grad`` of the outputs with fixed output gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from ..base import RotaryEncoding
from ..registry import create
from . import peers as peers_mod
from .timing import forward_call, interleaved, row

__all__ = ["FLOOR", "posenc_rope", "run"]

FLOOR = "floor"
PASSES = ("fwd", "fwd+bwd")


def posenc_rope(seq: int, head_dim: int, layout: str, **_: Any) -> Callable[..., Any]:
    """posenc's RoPE: ``posenc.create("rope", ...)``, tables from ``rotation`` once, then
    ``rotate`` of q and of k."""
    rope = cast(RotaryEncoding, create("rope", head_dim=head_dim, layout=layout))
    tables = rope.rotation(torch.arange(seq))

    def rotate(q, k):
        return rope.rotate(q, tables), rope.rotate(k, tables, key=True)

    return rotate


def _floor(q, k, grads) -> Callable[[], Any]:
    tensors = (q, k) if grads is None else (q, k, *grads)
    return lambda: tuple(t.clone() for t in tensors)


def run_one(
    seq: int,
    head_dim: int,
    dtype: str,
    layout: str,
    pass_: str,
    batch: int,
    heads: int,
    repeat: int,
    warmup: int,
    peers: bool = True,
) -> dict[str, Any]:
    """The record of one configuration (see :func:`posenc.bench.timing.row`)."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    shape = (batch, heads, seq, head_dim)
    q, k = (torch.randn(shape, generator=gen).to(dt) for _ in range(2))
    grads = None
    if pass_ == "fwd+bwd":
        grads = (torch.randn(shape, generator=gen).to(dt), torch.randn(shape, generator=gen).to(dt))
    config = {
        "seq": seq,
        "head_dim": head_dim,
        "dtype": dtype,
        "layout": layout,
        "pass": pass_,
        "batch": batch,
        "heads": heads,
    }
    impls: dict[str, Callable[[], Any]] = {
        FLOOR: _floor(q, k, grads),
        "posenc": forward_call(posenc_rope(seq, head_dim, layout), (q, k), grads),
    }
    skipped: dict[str, str] = {}
    if peers:
        usable, skipped = peers_mod.resolve(
            peers_mod.ROPE_PEERS,
            trial=lambda fn: fn(q, k),
            seq=seq,
            head_dim=head_dim,
            layout=layout,
            dtype=dt,
        )
        impls |= {name: forward_call(fn, (q, k), grads) for name, fn in usable.items()}
    stats = interleaved(impls, repeat=repeat, warmup=warmup)
    return row(config, stats, FLOOR, skipped)


def run(
    seqs: Sequence[int],
    head_dims: Sequence[int],
    dtypes: Sequence[str] = ("float32", "bfloat16"),
    layouts: Sequence[str] = ("half", "interleaved"),
    passes: Sequence[str] = PASSES,
    batch: int = 2,
    heads: int = 16,
    repeat: int = 10,
    warmup: int = 2,
    peers: bool = True,
) -> list[dict[str, Any]]:
    """Every configuration of the grid, in order (pass, dtype, layout, head_dim, seq)."""
    return [
        run_one(seq, hd, dtype, layout, pass_, batch, heads, repeat, warmup, peers)
        for pass_ in passes
        for dtype in dtypes
        for layout in layouts
        for hd in head_dims
        for seq in seqs
    ]
