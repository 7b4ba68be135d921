"""posenc.positions.multimodal: M-RoPE position ids of text, images and videos, against
transformers' get_rope_index (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and a naive reference of the
papers' rules, with padding, fractional seconds per frame and bad input."""

import math
import random
from types import SimpleNamespace

import pytest
import torch

from posenc.positions import multimodal

transformers = pytest.importorskip("transformers")
from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import (  # noqa: E402
    Ernie4_5_VLMoeModel,
)
from transformers.models.glm4v.modeling_glm4v import Glm4vModel  # noqa: E402
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel  # noqa: E402

IMAGE, VIDEO, START, END, PAD = 90, 91, 92, 93, 0  # token ids; text tokens are 1..80
MERGE = 2
IDS = {"image_token_id": IMAGE, "video_token_id": VIDEO}


def hf_get_rope_index(model_cls, input_ids, tokens_per_second=None, **kwargs):
    """transformers' ``get_rope_index``, called on a stub that carries only the config it
    reads (no model weights; ERNIE's vision merges 2 frames into one temporal patch)."""
    vision = SimpleNamespace(
        spatial_merge_size=MERGE, tokens_per_second=tokens_per_second, temporal_merge_size=2
    )
    stub = SimpleNamespace(config=SimpleNamespace(vision_config=vision))
    stub.get_vision_position_ids = model_cls.get_vision_position_ids.__get__(stub)
    token_types = (input_ids == IMAGE).int() + 2 * (input_ids == VIDEO).int()
    return model_cls.get_rope_index(stub, input_ids, token_types, **kwargs)


def naive(
    input_ids,
    images=(),
    videos=(),
    steps=None,
    attention_mask=None,
    exact=False,
    pad=0,
):
    """The papers' rules, token by token: text takes the next id on every axis; an item's
    tokens (frame, row, column order) take ``start + (τ(frame), row, col)`` with τ the
    frame index times its step, truncated unless ``exact``; after an item, the next id is
    its largest id plus one. ``images``/``videos``: merged (t, h, w) per item, in order."""
    images, videos = list(images), list(videos)
    steps = list(steps) if steps is not None else [1.0] * len(videos)
    batch, seq = input_ids.shape
    out = torch.full((3, batch, seq), pad, dtype=torch.float64)
    deltas = []
    for b in range(batch):
        kept = [i for i in range(seq) if attention_mask is None or attention_mask[b, i]]
        next_id, i = 0, 0
        while i < len(kept):
            token = int(input_ids[b, kept[i]])
            if token not in (IMAGE, VIDEO):
                out[:, b, kept[i]] = next_id
                next_id, i = next_id + 1, i + 1
                continue
            t, h, w = images.pop(0) if token == IMAGE else videos.pop(0)
            step = 1.0 if token == IMAGE else steps.pop(0)
            largest = next_id
            for frame in range(t):
                tau = frame * step if exact else math.trunc(float(frame * step))
                for row in range(h):
                    for col in range(w):
                        ids = (next_id + tau, next_id + row, next_id + col)
                        out[:, b, kept[i]] = torch.tensor(ids, dtype=torch.float64)
                        largest = max(largest, *ids)
                        i += 1
            next_id = math.ceil(largest) + 1  # whole ids: >= 1 past the largest
        deltas.append(next_id - len(kept))
    return out, torch.tensor(deltas).unsqueeze(1)


def random_batch(rng, batch, videos_up_to_space=True, padding="right"):
    """Random sequences of text, images and videos (each between vision start/end tokens)
    with left or right padding. Returns ids, mask, image and video grids (unmerged),
    and the merged (t, h, w) of each. With ``videos_up_to_space`` a video has no more
    frames than its merged rows or columns (where transformers 5 agrees with the papers)."""
    rows, images, videos = [], [], []
    for _ in range(batch):
        row = [rng.randint(1, 80) for _ in range(rng.randint(0, 3))]
        for _ in range(rng.randint(1, 4)):
            h, w = rng.randint(1, 3), rng.randint(1, 3)
            if rng.random() < 0.5:
                t, token, items = 1, IMAGE, images
            else:
                t = rng.randint(1, max(h, w)) if videos_up_to_space else rng.randint(1, 4)
                token, items = VIDEO, videos
            items.append((t, h, w))
            row += [START] + [token] * (t * h * w) + [END]
            row += [rng.randint(1, 80) for _ in range(rng.randint(0, 3))]
        rows.append(row)
    seq = max(len(r) for r in rows)
    ids = torch.full((batch, seq), PAD)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for b, row in enumerate(rows):
        at = slice(seq - len(row), seq) if padding == "left" else slice(0, len(row))
        ids[b, at], mask[b, at] = torch.tensor(row), 1
    grid = lambda items: torch.tensor(  # noqa: E731
        [(t, h * MERGE, w * MERGE) for t, h, w in items], dtype=torch.long
    ).reshape(-1, 3)
    return ids, mask, grid(images), grid(videos), images, videos


# --- (a) transformers ---


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("seed", range(4))
def test_qwen2_vl_equals_transformers(seed, padding):
    ids, mask, image_grid, video_grid, images, videos = random_batch(
        random.Random(seed), batch=3, padding=padding
    )
    kwargs = dict(image_grid_thw=image_grid, video_grid_thw=video_grid, attention_mask=mask)
    expected, expected_deltas = hf_get_rope_index(Qwen2VLModel, ids, **kwargs)
    positions, deltas = multimodal(ids, **kwargs, **IDS, vision_start_token_id=START)
    assert positions.dtype == torch.long and positions.shape == (3, 3, ids.shape[1])
    assert torch.equal(positions, expected)
    assert torch.equal(deltas, expected_deltas)
    # and the naive reference, with padding at 0 as transformers 5 fills it
    reference, reference_deltas = naive(ids, images, videos, attention_mask=mask)
    assert torch.equal(positions, reference.long()) and torch.equal(deltas, reference_deltas)


@pytest.mark.parametrize("seconds", [[0.5, 1.0, 0.25], [0.25, 0.75, 1.0], [0.083, 0.5, 0.9]])
def test_qwen2_5_vl_fractional_seconds_equal_transformers(seconds):
    """Qwen2.5-VL: τ = ⌊frame · second_per_grid_t · tokens_per_second⌋ in float32."""
    frames = (3, 2, 2)  # (frames - 1) * step <= 2: where transformers 5 follows the paper
    rows = [[5, START] + [VIDEO] * (t * 9) + [END, 6] for t in frames]  # 3x3 merged frames
    ids = torch.tensor([rows[0] + rows[1] + rows[2]])
    video_grid = torch.tensor([(t, 3 * MERGE, 3 * MERGE) for t in frames])
    second_per_grid_ts = torch.tensor(seconds)  # float32, as the processor returns it
    kwargs = dict(video_grid_thw=video_grid, second_per_grid_ts=second_per_grid_ts)
    expected, expected_deltas = hf_get_rope_index(
        Qwen2_5_VLModel, ids, tokens_per_second=2, **kwargs
    )
    positions, deltas = multimodal(ids, **kwargs, **IDS, tokens_per_second=2)
    assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas)
    steps = [2 * s for s in seconds]
    reference, _ = naive(ids, videos=[(t, 3, 3) for t in frames], steps=steps)
    assert torch.equal(positions, reference.long())


def test_half_a_second_is_not_rounded_to_zero():
    ids = torch.tensor([[7] + [VIDEO] * 4 + [8]])  # 4 frames of one merged patch
    grid = torch.tensor([[4, MERGE, MERGE]])
    positions, deltas = multimodal(
        ids, video_grid_thw=grid, **IDS, second_per_grid_ts=[0.5], tokens_per_second=2
    )
    assert positions[0, 0].tolist() == [0, 1, 2, 3, 4, 5]  # 0.5 s x 2 ids/s: one id per frame
    slow, slow_deltas = multimodal(
        ids, video_grid_thw=grid, **IDS, second_per_grid_ts=[0.25], tokens_per_second=2
    )
    assert slow[0, 0].tolist() == [0, 1, 1, 2, 2, 3]  # half an id per frame, truncated
    exact, exact_deltas = multimodal(
        ids,
        video_grid_thw=grid,
        **IDS,
        second_per_grid_ts=[0.25],
        tokens_per_second=2,
        exact_time=True,
    )
    assert exact.dtype == torch.float64
    # the text after the video resumes at its largest id rounded up, plus one: whole ids
    assert exact[0, 0].tolist() == [0, 1, 1.5, 2, 2.5, 4]
    assert torch.equal(exact[1:, :, :5], slow[1:, :, :5].double())
    assert deltas.tolist() == [[0]] and slow_deltas.tolist() == [[-2]]
    assert exact_deltas.tolist() == [[-1]]


def test_exact_time_is_exact_for_python_seconds():
    """Seconds given as Python floats are read in float64: 0.35 s x 2 ids/s over 11 frames
    ends at exactly 7.0, and the text after it at 8 (float32 would give 6.9999995 and 7)."""
    ids = torch.tensor([[5] + [VIDEO] * 11 + [6]])
    grid = torch.tensor([[11, MERGE, MERGE]])
    kwargs = dict(video_grid_thw=grid, **IDS, second_per_grid_ts=[0.35], tokens_per_second=2)
    exact, deltas = multimodal(ids, **kwargs, exact_time=True)
    assert exact[0, 0, -2:].tolist() == [1 + 10 * 0.35 * 2, 9.0]
    assert deltas.tolist() == [[10 - 13]]


def test_qwen3_vl_frames_split_by_timestamps_equal_transformers():
    """Qwen3-VL puts a timestamp before each frame and numbers each as its own item: pass
    one grid row per frame (``t = 1``), as its get_rope_index splits them."""
    rng = random.Random(0)
    row, frames = [3], []
    for _ in range(3):  # a 3-frame video of 2x3 merged tokens, then an image
        row += [rng.randint(1, 80), START] + [VIDEO] * 6 + [END]
        frames.append((1, 2 * MERGE, 3 * MERGE))
    row += [START] + [IMAGE] * 4 + [END, 9]
    ids = torch.tensor([row])
    video_grid = torch.tensor([(3, 2 * MERGE, 3 * MERGE)])
    image_grid = torch.tensor([(1, 2 * MERGE, 2 * MERGE)])
    expected, expected_deltas = hf_get_rope_index(
        Qwen3VLModel, ids, image_grid_thw=image_grid, video_grid_thw=video_grid
    )
    positions, deltas = multimodal(
        ids, image_grid, torch.tensor(frames), **IDS, vision_start_token_id=START
    )
    assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas)


@pytest.mark.parametrize("seed", range(3))
def test_glm4v_frames_split_by_timestamps_equal_transformers(seed):
    """GLM-4V numbers each frame as its own item after its timestamp: one grid row per
    frame (t = 1), as its get_rope_index splits them; padded rows of images and videos."""
    rng = random.Random(seed)
    rows, images, videos, frames = [], [], [], []
    for _ in range(3):
        row = [rng.randint(1, 80)]
        for _ in range(rng.randint(1, 3)):
            h, w = rng.randint(1, 3), rng.randint(1, 3)
            if rng.random() < 0.5:
                images.append((1, h * MERGE, w * MERGE))
                row += [START] + [IMAGE] * (h * w) + [END]
                continue
            t = rng.randint(1, 3)
            videos.append((t, h * MERGE, w * MERGE))
            frames += [(1, h * MERGE, w * MERGE)] * t
            for _ in range(t):  # a timestamp token, then the frame
                row += [rng.randint(1, 80), START] + [VIDEO] * (h * w) + [END]
        rows.append(row)
    width = max(map(len, rows))
    ids = torch.full((3, width), PAD)
    mask = torch.zeros(3, width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :], mask[b, width - len(row) :] = torch.tensor(row), 1
    image_grid = torch.tensor(images, dtype=torch.long).reshape(-1, 3)
    expected, expected_deltas = hf_get_rope_index(
        Glm4vModel, ids, image_grid_thw=image_grid,
        video_grid_thw=torch.tensor(videos, dtype=torch.long).reshape(-1, 3),
        attention_mask=mask,
    )  # fmt: skip
    positions, deltas = multimodal(
        ids, image_grid, torch.tensor(frames, dtype=torch.long).reshape(-1, 3), **IDS,
        attention_mask=mask,
    )  # fmt: skip
    assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas)


@pytest.mark.parametrize("seed", range(3))
def test_ernie_4_5_vl_merged_frames_equal_transformers(seed):
    """ERNIE-4.5-VL merges two frames into one temporal patch: its grid's t over 2 is
    multimodal's t; with no more patches than merged rows or columns, the ids agree."""
    ids, mask, image_grid, video_grid, _, _ = random_batch(random.Random(seed), batch=3)
    doubled = video_grid * torch.tensor([2, 1, 1])  # frames before the temporal merge
    expected, expected_deltas = hf_get_rope_index(
        Ernie4_5_VLMoeModel, ids, image_grid_thw=image_grid, video_grid_thw=doubled,
        attention_mask=mask,
    )  # fmt: skip
    positions, deltas = multimodal(ids, image_grid, video_grid, **IDS, attention_mask=mask)
    assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas)


def test_long_videos_follow_the_paper():
    """More frames than merged rows and columns: text after the video resumes past its
    largest temporal id (Qwen2-VL paper, original Qwen code). transformers 5 resumes at
    start + max(h, w) instead, inside the video's temporal ids; the video's own ids agree."""
    ids = torch.tensor([[7, START] + [VIDEO] * 8 + [END, 8]])  # 4 frames of 1x2 tokens
    grid = torch.tensor([[4, MERGE, 2 * MERGE]])
    positions, deltas = multimodal(ids, video_grid_thw=grid, **IDS)
    assert positions[:, 0].tolist() == [
        [0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 7],
        [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 6, 7],
        [0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 6, 7],
    ]
    assert deltas.tolist() == [[8 - 12]]
    expected, _ = hf_get_rope_index(Qwen2VLModel, ids, video_grid_thw=grid)
    assert torch.equal(positions[:, :, :10], expected[:, :, :10])


@pytest.mark.parametrize("seed", range(3))
def test_long_videos_equal_the_naive_reference(seed):
    ids, mask, image_grid, video_grid, images, videos = random_batch(
        random.Random(seed), batch=3, videos_up_to_space=False
    )
    kwargs = dict(image_grid_thw=image_grid, video_grid_thw=video_grid, attention_mask=mask)
    positions, deltas = multimodal(ids, **kwargs, **IDS)
    reference, reference_deltas = naive(ids, images, videos, attention_mask=mask)
    assert torch.equal(positions, reference.long()) and torch.equal(deltas, reference_deltas)


# --- (b) the rules themselves ---


def test_text_only_is_arange():
    ids = torch.randint(1, 80, (2, 7))
    positions, deltas = multimodal(ids, **IDS)
    assert torch.equal(positions, torch.arange(7).expand(3, 2, 7))
    assert deltas.tolist() == [[0], [0]]
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
    padded, padded_deltas = multimodal(ids, **IDS, attention_mask=mask)
    assert padded[0].tolist() == [[0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 0, 0]]
    assert padded_deltas.tolist() == [[0], [0]]


def test_image_and_continuation():
    # text, a 2x3 (merged) image, text: the image starts at 2, text resumes at 2 + 3
    ids = torch.tensor([[11, START] + [IMAGE] * 6 + [END, 12]])
    positions, deltas = multimodal(ids, torch.tensor([[1, 4, 6]]), **IDS)
    assert positions[:, 0].tolist() == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],
    ]
    # a continuation's token n (n >= 10) is at n + delta: right after the last id
    assert deltas.tolist() == [[7 - 10]]
    assert 10 + deltas.item() == positions.max() + 1


@pytest.mark.parametrize("seed", [0, 3, 5])  # batches with videos of several frames
def test_exact_time_keeps_fractional_video_times(seed):
    ids, mask, image_grid, video_grid, images, videos = random_batch(
        random.Random(seed), batch=2, videos_up_to_space=False
    )
    seconds = [random.Random(seed + i).choice([0.3, 0.5, 0.7, 1.25]) for i in range(len(videos))]
    kwargs = dict(
        image_grid_thw=image_grid,
        video_grid_thw=video_grid,
        attention_mask=mask,
        second_per_grid_ts=torch.tensor(seconds, dtype=torch.float64),
        tokens_per_second=3,
        **IDS,
    )
    assert any(t > 1 for t, _, _ in videos)
    exact, exact_deltas = multimodal(ids, **kwargs, exact_time=True)
    steps = [3 * s for s in seconds]
    reference, reference_deltas = naive(ids, images, videos, steps, attention_mask=mask, exact=True)
    torch.testing.assert_close(exact, reference, atol=1e-12, rtol=0)
    assert torch.equal(exact_deltas, reference_deltas)
    is_video = (ids == VIDEO) & mask.bool()
    whole = exact == exact.round()
    assert whole[1:].all() and whole[0][~is_video].all()  # only video times are fractional
    assert not whole[0][is_video].all()
    truncated, _ = multimodal(ids, **kwargs)
    assert not torch.equal(exact[0][is_video], truncated[0][is_video].double())


def test_tokens_per_second_alone_steps_one_second_per_frame():
    ids = torch.tensor([[VIDEO] * 3 + [4]])
    grid = torch.tensor([[3, MERGE, MERGE]])
    positions, _ = multimodal(ids, video_grid_thw=grid, **IDS, tokens_per_second=2)
    assert positions[0, 0].tolist() == [0, 2, 4, 5]
    expected, _ = hf_get_rope_index(Qwen2_5_VLModel, ids, tokens_per_second=2, video_grid_thw=grid)
    assert torch.equal(positions[..., :3], expected[..., :3])  # the text after: see above


def test_grids_are_taken_in_order_across_the_batch():
    """Grids are consumed in order across the batch: sequence 0's items, then sequence 1's."""
    ids = torch.tensor([[PAD, PAD, PAD, IMAGE, 3], [IMAGE] * 4 + [3]])
    mask = torch.tensor([[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]])
    grids = torch.tensor([[1, 2, 2], [1, 4, 4]])
    positions, deltas = multimodal(ids, grids, **IDS, attention_mask=mask)
    assert positions[:, 0].tolist() == [[0, 0, 0, 0, 1]] * 3
    assert positions[:, 1].tolist() == [
        [0, 0, 0, 0, 2],
        [0, 0, 1, 1, 2],
        [0, 1, 0, 1, 2],
    ]
    assert deltas.tolist() == [[0], [-2]]


# --- (c) bad input ---

GOOD = torch.tensor([[1, START] + [IMAGE] * 4 + [END, START] + [VIDEO] * 2 + [END]])
IMAGE_GRID = torch.tensor([[1, 4, 4]])
VIDEO_GRID = torch.tensor([[2, 2, 2]])


def call(**changes):
    kwargs = dict(
        input_ids=GOOD,
        image_grid_thw=IMAGE_GRID,
        video_grid_thw=VIDEO_GRID,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=START,
    )
    kwargs.update(changes)
    return multimodal(**kwargs)


def test_the_good_input_works():
    positions, _ = call()
    assert positions[:, 0].tolist() == [
        [0, 1, 2, 2, 2, 2, 4, 5, 6, 7, 8],
        [0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 8],
        [0, 1, 2, 3, 2, 3, 4, 5, 6, 6, 8],
    ]


@pytest.mark.parametrize(
    "changes, error, match",
    [
        ({"input_ids": GOOD[0]}, ValueError, r"input_ids must be \[batch, seq\]"),
        ({"input_ids": GOOD.float()}, TypeError, "input_ids must be an integer tensor"),
        ({"input_ids": GOOD.tolist()}, TypeError, "input_ids must be a torch.Tensor"),
        ({"image_grid_thw": None}, ValueError, r"4 image tokens .* describes 0"),
        ({"image_grid_thw": torch.tensor([[1, 4, 6]])}, ValueError, r"describes 6 .*\[6\]"),
        ({"image_grid_thw": torch.tensor([[1, 3, 4]])}, ValueError, "multiples of"),
        ({"image_grid_thw": torch.tensor([[1.0, 4, 4]])}, TypeError, "integer tensor"),
        ({"image_grid_thw": torch.tensor([1, 4, 4])}, ValueError, r"\[n, 3\]"),
        ({"image_grid_thw": torch.tensor([[0, 4, 4]])}, ValueError, ">= 1"),
        ({"video_grid_thw": torch.tensor([[1, 2, 2]])}, ValueError, "2 video tokens"),
        ({"image_token_id": VIDEO}, ValueError, "both 91"),
        ({"image_token_id": -1}, ValueError, "image_token_id must be >= 0"),
        ({"spatial_merge_size": 0}, ValueError, "spatial_merge_size must be >= 1"),
        ({"attention_mask": torch.ones(1, 5)}, ValueError, "shape of input_ids"),
        ({"attention_mask": torch.full(GOOD.shape, 2)}, ValueError, "only 0 and 1"),
        ({"second_per_grid_ts": [0.5]}, ValueError, "needs tokens_per_second"),
        (
            {"second_per_grid_ts": [0.5, 1.0], "tokens_per_second": 2},
            ValueError,
            r"one value per video \(1\)",
        ),
        ({"second_per_grid_ts": [0.0], "tokens_per_second": 2}, ValueError, "> 0"),
        ({"second_per_grid_ts": [0.5], "tokens_per_second": 0}, ValueError, "tokens_per_second"),
        (
            {"second_per_grid_ts": [0.5], "tokens_per_second": 2, "video_grid_thw": None},
            ValueError,
            "without video_grid_thw",
        ),
        ({"exact_time": 1}, TypeError, "exact_time must be a bool"),
        ({"vision_start_token_id": 77}, ValueError, "image 0 does not follow"),
        # the ids are computed from the values: a meta tensor (no values) is refused by name
        ({"input_ids": GOOD.to("meta")}, ValueError, "input_ids is on the meta device"),
        (
            {"image_grid_thw": torch.tensor([[1, 4, 4]], device="meta")},
            ValueError,
            "image_grid_thw is on the meta device",
        ),
        (
            {"attention_mask": torch.ones_like(GOOD, device="meta")},
            ValueError,
            "attention_mask is on the meta device",
        ),
        (
            {"attention_mask": torch.ones_like(GOOD, dtype=torch.complex64)},
            TypeError,
            "attention_mask must be a bool, integer or floating-point tensor",
        ),
    ],
)
def test_bad_input_is_named(changes, error, match):
    with pytest.raises(error, match=match):
        call(**changes)


def test_items_must_be_whole_runs():
    split = GOOD.clone()
    split[0, 3] = 5  # text inside the image
    split = torch.cat((split, torch.tensor([[IMAGE]])), dim=1)  # the count still matches
    with pytest.raises(ValueError, match=r"image 0 .* not one run"):
        call(input_ids=split)
    # an image that starts in one sequence and ends in the next
    across = torch.tensor([[1, 2, IMAGE, IMAGE], [IMAGE, IMAGE, 3, 4]])
    with pytest.raises(ValueError, match="not one run"):
        multimodal(across, torch.tensor([[1, 2, 8]]), **IDS)
    # padding inside an item is skipped, as transformers does
    gap = torch.tensor([[1, IMAGE, IMAGE, PAD, IMAGE, IMAGE, 2]])
    mask = (gap != PAD).long()
    positions, _ = multimodal(gap, IMAGE_GRID, **IDS, attention_mask=mask)
    assert positions[1, 0].tolist() == [0, 1, 1, 0, 2, 2, 3]
