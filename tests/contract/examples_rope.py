"""Valid calls of the public methods of RoPE's family of encoding classes (see
tests/contract/registry.py): :class:`~posenc.rotary.rope.RoPE`,
:class:`~posenc.rotary.xpos.XPos`, :class:`~posenc.rotary.video.RoPE3D` and
:class:`~posenc.rotary.dca.DualChunkRoPE`."""

from __future__ import annotations

import torch
from tests.contract.registry import CPU, EXEMPT, LABEL, B, D, H, P, S, call, example, gen, heads

import posenc

__all__: list[str] = []

# [seq, 3] (t, h, w) coordinates of a 1 x 2 x 2 video grid
VIDEO = posenc.positions.video_grid(1, 2, 2)


def rope() -> posenc.RotaryEncoding:
    """A RoPE whose last half of each head turns (DeepSeek-V4's place): a rotation of the
    whole head or of another width is not its rotation."""
    return posenc.create("rope", head_dim=D, partial_rotary_factor=0.5, rotary_at="end")


def dynamic() -> posenc.RotaryEncoding:
    """A RoPE whose frequencies read ``seq_len`` (dynamic NTK past 4 positions)."""
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}
    return posenc.create("rope", head_dim=D, scaling=scaling)


def xpos() -> posenc.RotaryEncoding:
    return posenc.create("xpos", head_dim=D)


def rope_3d() -> posenc.RotaryEncoding:
    return posenc.create("rope_3d", head_dim=12, grid=(1, 2, 2))


def dca() -> posenc.RotaryEncoding:
    return posenc.create("dca", head_dim=D, chunk_size=4, local_size=1)


# RoPE
example("posenc.rotary.rope.RoPE.inv_freq", lambda: call(dynamic().inv_freq, 8, device="cpu"))
example("posenc.rotary.rope.RoPE.attention_factor", lambda: call(dynamic().attention_factor, 8))
example("posenc.rotary.rope.RoPE.rotation", lambda: call(dynamic().rotation, P, seq_len=8))
example(
    "posenc.rotary.rope.RoPE.rotate",
    lambda: call(rope().rotate, heads(), rope().rotation(P), key=False),
)
example(
    "posenc.rotary.rope.RoPE.rotate_back",
    lambda: call(rope().rotate_back, heads(), rope().rotation(P)),
)
example(
    "posenc.rotary.rope.RoPE.rotate_pair",
    lambda: call(rope().rotate_pair, heads(1), heads(2), rope().rotation(P)),
)

# xPos
example("posenc.rotary.xpos.XPos.zeta", lambda: call(xpos().zeta, device="cpu"))
example("posenc.rotary.xpos.XPos.max_distance", lambda: call(xpos().max_distance, torch.float64))
example(
    "posenc.rotary.xpos.XPos.check_positions",
    lambda: call(xpos().check_positions, P, seq_len=S, batch=1, name="positions", device=CPU),
    ok={"name": LABEL},
)
example("posenc.rotary.xpos.XPos.rotation", lambda: call(xpos().rotation, P, seq_len=S))
example(
    "posenc.rotary.xpos.XPos.rotate",
    lambda: call(xpos().rotate, heads(), xpos().rotation(P), key=True),
)
EXEMPT["posenc.rotary.xpos.XPos.rotate_back"] = (
    "always a TypeError: xPos scales queries and keys apart, so no conjugate undoes it"
)

# rope_3d
example("posenc.rotary.video.RoPE3D.inv_freq", lambda: call(rope_3d().inv_freq, device="cpu"))
example(
    "posenc.rotary.video.RoPE3D.default_positions",
    lambda: call(rope_3d().default_positions, S, device="cpu", offset=0),
)
example("posenc.rotary.video.RoPE3D.rotation", lambda: call(rope_3d().rotation, VIDEO, seq_len=S))
example(
    "posenc.rotary.video.RoPE3D.rotate",
    lambda: call(rope_3d().rotate, gen(B, H, S, 12), rope_3d().rotation(VIDEO), key=False),
)

# dca
example("posenc.rotary.dca.DualChunkRoPE.rotation", lambda: call(dca().rotation, P, seq_len=S))
example("posenc.rotary.dca.DualChunkRoPE.query_rotations", lambda: call(dca().query_rotations, P))
