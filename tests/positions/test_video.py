"""``video_grid``: the ``(t, h, w)`` positions of a video's latent tokens, against a loop
over the grid, and its bad inputs refused by name."""

from __future__ import annotations

import pytest
import torch

from posenc.positions import video_grid


def test_equals_a_loop_over_frames_rows_and_columns():
    expected = [[t, h, w] for t in range(3) for h in range(2) for w in range(4)]
    got = video_grid(3, 2, 4)
    assert got.dtype == torch.int64 and got.tolist() == expected
    scaled = video_grid(3, 2, 4, fps=12, base_fps=30)
    assert scaled.dtype == torch.float64
    assert scaled.tolist() == [[t * 30 / 12, h, w] for t, h, w in expected]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"base_fps": "x"}, TypeError, "base_fps must be a number"),  # ignored without fps
        ({"base_fps": 0}, ValueError, "base_fps must be > 0"),
        ({"base_fps": True}, TypeError, "base_fps"),
        ({"fps": float("nan")}, ValueError, "fps must be finite"),
        ({"fps": "24"}, TypeError, "fps must be a number"),
        ({"device": 3}, TypeError, "device"),
        ({"device": "nowhere"}, ValueError, "device"),
    ],
)
def test_bad_keywords_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        video_grid(2, 2, 2, **kwargs)


@pytest.mark.parametrize(
    ("sizes", "error", "match"),
    [
        ((0, 2, 2), ValueError, "frames must be >= 1"),
        ((2, True, 2), TypeError, "height must be an int"),
        ((2, 2, 2.0), TypeError, "width must be an int"),
        ((2**16, 2**16, 2**16), ValueError, "frames · height · width"),  # 2^48 tokens
    ],
)
def test_bad_sizes_are_named(sizes, error, match):
    with pytest.raises(error, match=match):
        video_grid(*sizes)
