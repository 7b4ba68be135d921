"""Valid calls of posenc's positions callables (see tests/contract/registry.py)."""

from __future__ import annotations

import torch
from tests.contract.registry import EXEMPT, P, call, example

import posenc
from posenc import positions as pos

__all__: list[str] = []

CPU = torch.device("cpu")
GRID = pos.grid(2, 2)  # [4, 2] (row, column) of a 2 x 2 grid
MASK = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])  # [batch, seq] 0/1: left and right padding
SEGMENTS = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 2]])  # [batch, seq] packed documents


def grid_encoding() -> posenc.Encoding:
    return posenc.create("sincos_2d", dim=8, grid=(2, 2))


# labels: any string names the argument in messages (an unknown label is still a label)
LABEL = ("choice",)

EXEMPT["posenc.positions.AttnPositions"] = (
    "a record of positions that AttnPositions.build checked and built; build is probed"
)
EXEMPT["posenc.positions.position_at"] = (
    "a helper posenc's score_mods call inside flex attention with positions they checked; "
    "a check there would run inside every traced score"
)

example(
    "posenc.positions.AttnPositions.build",
    lambda: call(pos.AttnPositions.build, 4, 4, 1, CPU, q_positions=P, k_positions=P),
)
example(
    "posenc.positions.GridMixin.check_positions",
    lambda: call(
        grid_encoding().check_positions, GRID, seq_len=4, batch=1, name="positions", device=CPU
    ),
    ok={"name": LABEL},
)
example(
    "posenc.positions.GridMixin.default_positions",
    lambda: call(grid_encoding().default_positions, 3, device="cpu", offset=1),
)
example(
    "posenc.positions.PositionSampler",
    lambda: call(pos.PositionSampler, "pose", max_position=64, chunks=2),
)
example("posenc.positions.arange", lambda: call(pos.arange, 4, device="cpu", offset=2))
example("posenc.positions.causal_mask", lambda: call(pos.causal_mask, P, P))
example(
    "posenc.positions.check_batch",
    lambda: call(pos.check_batch, P.expand(2, -1), 2, name="positions", axes=1),
    # a shape check: a meta tensor has its shape, and check_batch returns nothing
    ok={"name": LABEL, "positions": ("meta",)},
)
example(
    "posenc.positions.check_grid",
    lambda: call(pos.check_grid, "grid", (2, 3), optional=False),
    ok={"name": LABEL},
    alias={"value": ("grid",)},  # its errors name the value by ``name``
)
example(
    "posenc.positions.check_grid_config",
    lambda: call(pos.check_grid_config, grid_encoding().config, optional=True),
)
example(
    "posenc.positions.check_padding_mask",
    lambda: call(pos.check_padding_mask, MASK, name="attention_mask"),
    ok={"name": LABEL},
    alias={"mask": ("attention_mask",)},  # its errors name the mask by ``name``
)
example(
    "posenc.positions.check_positions",
    lambda: call(
        pos.check_positions,
        P,
        seq_len=4,
        name="positions",
        integer=True,
        limit=8,
        limit_name="max_positions",
        ndims=(1, 2),
        axes=1,
        nonnegative=True,
        device="cpu",
    ),
    ok={"name": LABEL, "limit_name": LABEL},
)
example(
    "posenc.positions.check_segment_ids",
    lambda: call(pos.check_segment_ids, SEGMENTS, name="segment_ids"),
    ok={"name": LABEL},
)
example("posenc.positions.document_starts", lambda: call(pos.document_starts, SEGMENTS))
example("posenc.positions.from_padding", lambda: call(pos.from_padding, MASK))
example(
    "posenc.positions.from_segments",
    lambda: call(pos.from_segments, SEGMENTS, attention_mask=MASK),
)
example(
    "posenc.positions.grid",
    lambda: call(pos.grid, 2, 3, prefix=1, normalize=False, device="cpu"),
)
example(
    "posenc.positions.grid_default_positions",
    lambda: call(pos.grid_default_positions, grid_encoding().config, 3, device="cpu", offset=1),
)


def _multimodal() -> tuple:
    # text, <vision_start>, a 1 x 4 x 4 image (4 tokens after the 2 x 2 merge), text,
    # <vision_start>, a 2 x 4 x 4 video (8 tokens), text
    ids = torch.tensor([[5, 9] + [8] * 4 + [5, 9] + [7] * 8 + [5]])
    return call(
        pos.multimodal,
        ids,
        torch.tensor([[1, 4, 4]]),
        torch.tensor([[2, 4, 4]]),
        image_token_id=8,
        video_token_id=7,
        vision_start_token_id=9,
        spatial_merge_size=2,
        attention_mask=torch.ones_like(ids),
        second_per_grid_ts=torch.tensor([0.5]),
        tokens_per_second=2.0,
        exact_time=False,
    )


example(
    "posenc.positions.multimodal",
    _multimodal,
    # Python numbers are documented (a processor's list of seconds)
    ok={"second_per_grid_ts": ("list",)},
)
example(
    "posenc.positions.pose",
    lambda: call(
        pos.pose, 2, 6, 50, chunks=2, generator=torch.Generator().manual_seed(0), device="cpu"
    ),
)
example(
    "posenc.positions.query_offset",
    lambda: call(pos.query_offset, 2, 5, given="q_positions and k_positions"),
    ok={"given": LABEL},  # the arguments to name in the error: any text
)
example(
    "posenc.positions.randomized",
    lambda: call(
        pos.randomized, 2, 5, 100, generator=torch.Generator().manual_seed(0), device="cpu"
    ),
)


def _tmrope() -> tuple:
    # text, <audio_start> 3 audio tokens </audio>, <vision_start> a 1 x 4 x 4 image (4 tokens),
    # <vision_start> a 2 x 4 x 4 video (8 tokens), text
    ids = [1, 8, 5, 5, 5, 9, 2, 7, 6, 6, 6, 6, 3, 7] + [4] * 8 + [3]
    ids = torch.tensor([ids])
    return call(
        pos.tmrope,
        ids,
        torch.tensor([[1, 4, 4]]),
        torch.tensor([[2, 4, 4]]),
        image_token_id=6,
        video_token_id=4,
        audio_token_id=5,
        vision_start_token_id=7,
        audio_start_token_id=8,
        spatial_merge_size=2,
        position_id_per_seconds=25.0,
        second_per_grids=torch.tensor([0.5]),
        use_audio_in_video=False,
        attention_mask=torch.ones_like(ids),
        model_type="qwen2_5_omni",
    )


example(
    "posenc.positions.tmrope",
    _tmrope,
    # Python numbers are documented (a processor's list of seconds)
    ok={"second_per_grids": ("list",)},
)
example(
    "posenc.positions.video_grid",
    lambda: call(pos.video_grid, 2, 3, 4, fps=12.0, base_fps=24.0, device="cpu"),
)
