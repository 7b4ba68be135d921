"""posenc.positions.tmrope: TMRoPE ids of text, images, videos and audio (Qwen2.5-Omni,
Qwen3-Omni), against transformers' get_rope_index on random batches, a hand-written case
and bad input."""

import random
from types import SimpleNamespace

import pytest
import torch

from posenc.positions import tmrope

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as omni2  # noqa: E402
from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as omni3  # noqa: E402

IMAGE, VIDEO, AUDIO, V_START, V_END, A_START, A_END, PAD = 90, 91, 92, 93, 94, 95, 96, 0
MERGE, PER_SECOND, SECONDS_PER_CHUNK, N_WINDOW = 2, 25, 2, 50
IDS = dict(
    image_token_id=IMAGE,
    video_token_id=VIDEO,
    audio_token_id=AUDIO,
    vision_start_token_id=V_START,
    audio_start_token_id=A_START,
)
CLASSES = {
    "qwen2_5_omni": omni2.Qwen2_5OmniPreTrainedModelForConditionalGeneration,
    "qwen3_omni_moe": omni3.Qwen3OmniMoePreTrainedModelForConditionalGeneration,
}


def audio_tokens(model_type, features):
    """Audio tokens of ``features`` mel frames, by each family's own formula."""
    if model_type == "qwen2_5_omni":  # two stride-2 stages (transformers' get_rope_index)
        return ((features - 1) // 2 + 1 - 2) // 2 + 1
    return int(omni3._get_feat_extract_output_lengths(torch.tensor(features), N_WINDOW))


def hf_get_rope_index(model_type, input_ids, **kwargs):
    """transformers' ``get_rope_index`` on a stub holding only the config it reads."""
    cls = CLASSES[model_type]
    config = SimpleNamespace(
        **IDS,
        position_id_per_seconds=PER_SECOND,
        seconds_per_chunk=SECONDS_PER_CHUNK,
        audio_config=SimpleNamespace(n_window=N_WINDOW),
    )
    stub = SimpleNamespace(config=config, spatial_merge_size=MERGE)
    stub.get_llm_pos_ids_for_vision = cls.get_llm_pos_ids_for_vision.__get__(stub)
    stub.get_chunked_index = cls.get_chunked_index.__get__(stub)
    return cls.get_rope_index(stub, input_ids, **kwargs)


def interleave(model_type, frame_ids, n_audio):
    """The processor's order of a video's tokens (temporal ids ``frame_ids``, one per
    token) and its ``n_audio`` audio tokens: Qwen2.5-Omni by ``seconds_per_chunk`` chunks
    (transformers' own chunking), Qwen3-Omni by time, a frame first on a tie."""
    if model_type == "qwen2_5_omni":
        per_chunk = PER_SECOND * SECONDS_PER_CHUNK
        cls = CLASSES[model_type]
        video = cls.get_chunked_index(None, torch.tensor(frame_ids), per_chunk, 0)
        audio = cls.get_chunked_index(None, torch.arange(n_audio), per_chunk, 0)
        order = []
        for j in range(max(len(video), len(audio))):
            for chunks, token in ((video, VIDEO), (audio, AUDIO)):
                if j < len(chunks):
                    order += [token] * (chunks[j][1] - chunks[j][0])
        return order
    order, v, a = [], 0, 0
    while v < len(frame_ids) and a < n_audio:
        if frame_ids[v] <= a:
            order, v = [*order, VIDEO], v + 1
        else:
            order, a = [*order, AUDIO], a + 1
    return order + [VIDEO] * (len(frame_ids) - v) + [AUDIO] * (n_audio - a)


def random_batch(model_type, rng, batch, audio_in_video):
    """Rows of text, images, videos (with their audio when ``audio_in_video``) and audio
    clips, left- or right-padded, and the inputs transformers takes for them."""
    rows, images, videos, seconds, features = [], [], [], [], []
    for _ in range(batch):
        row = [rng.randint(1, 80) for _ in range(rng.randint(0, 3))]
        for _ in range(rng.randint(1, 3)):
            item = rng.choice(["image", "video", "audio"])
            t, h, w = rng.randint(1, 3), 2 * rng.randint(1, 4), 2 * rng.randint(1, 4)
            if item == "image":
                images.append((1, h, w))
                row += [V_START] + [IMAGE] * (h * w // MERGE**2) + [V_END]
            elif item == "audio" or audio_in_video:
                features.append(rng.randint(8, 400))
            if item == "audio":
                row += [A_START] + [AUDIO] * audio_tokens(model_type, features[-1]) + [A_END]
            if item == "video":
                videos.append((t, h, w))
                seconds.append(rng.choice([0.5, 1.0, 2.0, 0.36, 1.7, 4.2]))
                frame = torch.arange(t) * torch.tensor(seconds[-1]) * PER_SECOND
                frames = frame.long() if model_type == "qwen2_5_omni" else frame
                frame_ids = frames.repeat_interleave(h * w // MERGE**2).tolist()
                if audio_in_video:
                    n = audio_tokens(model_type, features[-1])
                    body = interleave(model_type, frame_ids, n)
                    row += [V_START, A_START, *body, A_END, V_END]
                else:
                    row += [V_START] + [VIDEO] * len(frame_ids) + [V_END]
            row += [rng.randint(1, 80) for _ in range(rng.randint(0, 3))]
        rows.append(row)
    width = max(map(len, rows))
    ids = torch.full((batch, width), PAD)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, row in enumerate(rows):
        at = slice(width - len(row), width) if b % 2 else slice(0, len(row))
        ids[b, at], mask[b, at] = torch.tensor(row), 1
    grid = {
        "image_grid_thw": torch.tensor(images).view(-1, 3) if images else None,
        "video_grid_thw": torch.tensor(videos).view(-1, 3) if videos else None,
    }
    if grid["image_grid_thw"] is None and grid["video_grid_thw"] is None:
        grid["image_grid_thw"] = torch.zeros(0, 3, dtype=torch.long)  # transformers' branch
    return ids, mask, grid, torch.tensor(seconds), torch.tensor(features)


@pytest.mark.parametrize("audio_in_video", [False, True])
@pytest.mark.parametrize("model_type", sorted(CLASSES))
@pytest.mark.parametrize("seed", range(6))
def test_ids_equal_transformers(model_type, audio_in_video, seed):
    """Random batches: every kept token's three ids and the deltas equal transformers'."""
    ids, mask, grid, seconds, features = random_batch(
        model_type, random.Random(seed), 3, audio_in_video
    )
    expected, expected_deltas = hf_get_rope_index(
        model_type,
        ids,
        **grid,
        attention_mask=mask,
        use_audio_in_video=audio_in_video,
        audio_seqlens=features,
        second_per_grids=seconds,
    )
    positions, deltas = tmrope(
        ids,
        **grid,
        **IDS,
        spatial_merge_size=MERGE,
        position_id_per_seconds=PER_SECOND,
        second_per_grids=seconds if len(seconds) else None,
        use_audio_in_video=audio_in_video,
        attention_mask=mask,
        model_type=model_type,
    )
    assert positions.dtype == expected.dtype and deltas.dtype == expected_deltas.dtype
    kept = mask.bool().expand(3, -1, -1)
    assert torch.equal(positions[kept], expected[kept])  # padding: 0 here, 1 or 0 there
    assert torch.equal(positions[~kept], torch.zeros_like(positions[~kept]))
    assert torch.equal(deltas, expected_deltas.to(deltas.dtype))


def test_a_video_with_its_audio_by_hand():
    """Qwen2.5-Omni: one frame of 2x2 tokens at 0 s and one at 1 s (25 ids later), three
    audio tokens; the two start markers share id 1, the frame and the audio start at 2; the
    end markers share one past the last modality's largest id."""
    body = [VIDEO] * 4 + [AUDIO] * 3 + [VIDEO] * 4
    ids = torch.tensor([[7, V_START, A_START, *body, A_END, V_END, 8]])
    kwargs = dict(IDS, second_per_grids=torch.tensor([1.0]), use_audio_in_video=True)
    positions, _ = tmrope(ids, video_grid_thw=torch.tensor([[2, 4, 4]]), **kwargs)
    assert positions[0, 0].tolist() == [0, 1, 1] + [2] * 4 + [2, 3, 4] + [27] * 4 + [28, 28, 29]
    assert positions[1, 0, 3:7].tolist() == [2, 2, 3, 3]  # rows
    assert positions[2, 0, 3:7].tolist() == [2, 3, 2, 3]  # columns
    assert positions[:, 0, 7:10].tolist() == [[2, 3, 4]] * 3  # audio on all three axes
    grid = torch.tensor([[2, 4, 4]])
    qwen3, _ = tmrope(ids, video_grid_thw=grid, **kwargs, model_type="qwen3_omni_moe")
    assert qwen3[0, 0].tolist() == [0, 1, 2] + [3] * 4 + [3, 4, 5] + [28] * 4 + [29, 30, 31]


def test_the_ids_do_not_depend_on_the_chunking():
    """Each token's id follows its own modality: the same video and audio laid out by
    Qwen2.5-Omni's chunks and by Qwen3-Omni's time order get the same ids per token."""
    frame_ids = torch.tensor([0, 60, 120]).repeat_interleave(4).tolist()
    n_audio = 150
    grid = torch.tensor([[3, 4, 4]])
    got = []
    for model_type in CLASSES:
        body = interleave(model_type, frame_ids, n_audio)
        ids = torch.tensor([[V_START, A_START, *body, A_END, V_END]])
        positions, _ = tmrope(
            ids, video_grid_thw=grid, **IDS, second_per_grids=[2.4], use_audio_in_video=True
        )
        inner = positions[:, 0, 2:-2]
        got.append((inner[:, ids[0, 2:-2] == VIDEO], inner[:, ids[0, 2:-2] == AUDIO]))
    assert interleave("qwen2_5_omni", frame_ids, n_audio) != interleave(
        "qwen3_omni_moe", frame_ids, n_audio
    )
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1])


def test_bad_input_is_named():
    ids = torch.tensor([[1, V_START, VIDEO, VIDEO, V_END]])
    grid = torch.tensor([[2, 2, 2]])
    with pytest.raises(ValueError, match="second_per_grids"):
        tmrope(ids, video_grid_thw=grid, **IDS)
    with pytest.raises(ValueError, match="model_type must be one of"):
        tmrope(ids, video_grid_thw=grid, **IDS, second_per_grids=[1.0], model_type="qwen2_vl")
    with pytest.raises(ValueError, match="has no audio tokens"):
        tmrope(ids, video_grid_thw=grid, **IDS, second_per_grids=[1.0], use_audio_in_video=True)
    with pytest.raises(ValueError, match="start marker"):
        tmrope(torch.tensor([[1, VIDEO, VIDEO]]), video_grid_thw=grid, **IDS, second_per_grids=[1])
    with pytest.raises(ValueError, match="a run of 2, but its video_grid_thw row gives 4"):
        tmrope(ids, video_grid_thw=torch.tensor([[4, 2, 2]]), **IDS, second_per_grids=[1.0])
    with pytest.raises(ValueError, match="more rows than input_ids has items"):
        tmrope(ids, video_grid_thw=grid.repeat(2, 1), **IDS, second_per_grids=[1.0, 1.0])
    with pytest.raises(ValueError, match="second_per_grids has 2 values for 1 videos"):
        tmrope(ids, video_grid_thw=grid, **IDS, second_per_grids=[1.0, 1.0])
    with pytest.raises(ValueError, match="the token ids must differ"):
        tmrope(ids, video_grid_thw=grid, **{**IDS, "audio_token_id": IMAGE})
    with pytest.raises(TypeError, match="use_audio_in_video must be a bool"):
        tmrope(ids, video_grid_thw=grid, **IDS, second_per_grids=[1.0], use_audio_in_video=1)
