"""The figure of the position ids of a multimodal sequence: :func:`mrope_ids`.

The (temporal, height, width) ids M-RoPE gives text, an image and a video (Wang et al.
2024, Qwen2-VL, arXiv:2409.12191; :func:`posenc.positions.multimodal`), or, with audio,
the ids TMRoPE gives text, an image and a video with its own sound on one clock (Xu et al.
2025, Qwen2.5-Omni, arXiv:2503.20215; :func:`posenc.positions.tmrope`).

matplotlib (the ``plot`` extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..config import check_float
from ..positions import multimodal, tmrope
from .common import check_size, check_sizes, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["mrope_ids"]

#: token ids of the sequences drawn (any distinct ids would do)
TEXT_ID, IMAGE_ID, VIDEO_ID, AUDIO_ID, VISION_START, AUDIO_START, END = range(1, 8)
#: TMRoPE's clock: ids per second (Qwen2.5-Omni's ``position_id_per_seconds``)
PER_SECOND = 25

Spans = list[tuple[str, int]]


def sequence(
    text: int, image: tuple[int, ...], video: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor, Spans]:
    """Text, an ``image`` ``(h, w)`` of tokens, a ``video`` ``(t, h, w)`` of tokens and
    text again, one token per merged patch: ``(input_ids [seq], M-RoPE ids [3, seq],
    [(name, tokens)] of each span)``."""
    (ih, iw), (vt, vh, vw) = image, video
    spans = [("text", text), ("image", ih * iw), ("video", vt * vh * vw), ("text", text)]
    kinds = {"text": TEXT_ID, "image": IMAGE_ID, "video": VIDEO_ID}
    ids = torch.tensor([kinds[name] for name, n in spans for _ in range(n)], dtype=torch.long)
    positions, _ = multimodal(
        ids[None],
        image_grid_thw=torch.tensor([[1, ih, iw]]),
        video_grid_thw=torch.tensor([[vt, vh, vw]]),
        image_token_id=IMAGE_ID,
        video_token_id=VIDEO_ID,
        spatial_merge_size=1,
    )
    return ids, positions[:, 0], spans


def omni_sequence(
    text: int, image: tuple[int, ...], video: tuple[int, ...], audio: int, seconds: float
) -> tuple[torch.Tensor, torch.Tensor, Spans]:
    """As :func:`sequence`, with start and end markers around each item and ``audio``
    tokens of the video's own sound laid out in time with its frames (``seconds`` apart),
    and Qwen2.5-Omni's TMRoPE ids."""
    (ih, iw), (vt, vh, vw) = image, video
    # the processor's order in time: each frame, then the sound up to the next frame
    frame_ids = (torch.arange(vt) * torch.tensor(seconds) * PER_SECOND).long().tolist()
    body: list[int] = []
    for i in range(vt):
        upto = frame_ids[i + 1] if i + 1 < vt else audio
        heard = sum(1 for token in body if token == AUDIO_ID)
        body += [VIDEO_ID] * (vh * vw) + [AUDIO_ID] * max(0, min(upto, audio) - heard)
    image_run = [VISION_START] + [IMAGE_ID] * (ih * iw) + [END]
    video_run = [VISION_START, AUDIO_START, *body, END, END]
    ids = torch.tensor([TEXT_ID] * text + image_run + video_run + [TEXT_ID] * text)
    positions, _ = tmrope(
        ids[None],
        image_grid_thw=torch.tensor([[1, ih, iw]]),
        video_grid_thw=torch.tensor([[vt, vh, vw]]),
        image_token_id=IMAGE_ID,
        video_token_id=VIDEO_ID,
        audio_token_id=AUDIO_ID,
        vision_start_token_id=VISION_START,
        audio_start_token_id=AUDIO_START,
        spatial_merge_size=1,
        position_id_per_seconds=PER_SECOND,
        second_per_grids=torch.tensor([seconds]),
        use_audio_in_video=True,
    )
    spans = [("text", text), ("image", len(image_run)), ("video + audio", len(video_run))]
    return ids, positions[:, 0], [*spans, ("text", text)]


def mrope_ids(
    text: int = 4,
    image: tuple[int, int] = (2, 3),
    video: tuple[int, int, int] = (2, 2, 2),
    audio: int = 0,
    seconds_per_frame: float = 0.12,
) -> Figure:
    """The (t, h, w) ids of text, an image, a video and text again, as three rows.

    Text advances all three ids together; an image's or video's tokens share a start and
    spread over rows and columns (and frames); text after them resumes past the largest id.
    With ``audio``, the video carries its sound and the ids are TMRoPE's (Qwen2.5-Omni): 25
    ids per second, frames ``seconds_per_frame`` apart, the k-th audio token (40 ms each)
    at the video's start plus k, on all three axes.

    Args:
        text: text tokens before the image and again after the video (>= 0).
        image: ``(h, w)`` tokens of the image (merged patches).
        video: ``(t, h, w)`` frames and tokens of the video.
        audio: audio tokens of the video's sound (0: no sound, M-RoPE's ids of Qwen2-VL).
        seconds_per_frame: seconds between the video's frames, with ``audio``.

    Returns:
        a matplotlib ``Figure`` with one ``[3, seq]`` image of the ids (rows t, h, w), each
        cell labelled with its id when the sequence is short, and the spans marked.

    Raises:
        ValueError, TypeError: naming the parameter.
    """
    from matplotlib.ticker import MaxNLocator

    check_size("text", text, minimum=0)
    check_size("audio", audio, minimum=0)
    shapes = (check_sizes("image", image, 2), check_sizes("video", video, 3))
    if audio:
        check_float("seconds_per_frame", seconds_per_frame)
        ids, positions, spans = omni_sequence(text, *shapes, audio, seconds_per_frame)
        title = "TMRoPE (t, h, w) ids: text, image, video with its audio, text"
    else:
        ids, positions, spans = sequence(text, *shapes)
        title = "M-RoPE (t, h, w) position ids: text, image, video, text"
    seq = ids.numel()
    fig, axes = new_figure(1, title=title, width=7.0 if seq <= 48 else 10.0, height=3.2)
    ax = axes[0]
    data = positions.numpy()
    picture = ax.imshow(data, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_yticks([0, 1, 2], ["t", "h", "w"])
    ax.set_ylabel("axis of the id")
    ax.set_xlabel("token index (tokens)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if seq <= 64:
        middle = (data.max() + data.min()) / 2
        for axis in range(3):
            for i in range(seq):
                value = int(data[axis, i])
                colour = "black" if value > middle else "white"
                ax.text(i, axis, str(value), ha="center", va="center", fontsize=6, color=colour)
    start = 0
    for name, n in spans:
        if n:
            ax.axvline(start - 0.5, color="white", linewidth=2)
            ax.text(start + (n - 1) / 2, -0.75, name, ha="center", va="bottom", fontsize=8)
        start += n
    fig.colorbar(picture, ax=ax, label="position id")
    return fig
