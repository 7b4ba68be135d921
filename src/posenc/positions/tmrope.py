"""Position ids of text mixed with images, videos and audio on one clock (TMRoPE, Qwen-Omni).

Xu et al. 2025, "Qwen2.5-Omni Technical Report", arXiv:2503.20215, section 2.2 (TMRoPE,
time-aligned multimodal RoPE); Qwen3-Omni: Xu et al. 2025, arXiv:2509.17765. Every token gets
three ids (temporal, height, width), ``[3, batch, seq]``, read by M-RoPE
(:class:`~posenc.rotary.MRoPE`):

- text, and every start and end marker, takes the next id on all three axes;
- an audio clip's tokens (one per 40 ms) take consecutive ids, like text: with
  ``position_id_per_seconds = 25`` one id is 40 ms, so audio sits on the clock;
- an image's or video's ``t·h·w`` tokens (merged patches) take ``(s + τ(i), s + j, s + k)``
  for frame i, row j, column k, with ``τ(i) = i · second_per_grid · position_id_per_seconds``
  (seconds per temporal patch, in float32: truncated to an integer by Qwen2.5-Omni, kept
  fractional by Qwen3-Omni; images step by ``position_id_per_seconds`` per frame), ``s`` the
  id the next token would have had;
- a video with its own audio (``use_audio_in_video``) puts both on the same clock from the
  same start ``s``: video tokens as above, the k-th audio token at ``s + k``, so a frame and
  the sound of that instant share a temporal id. The processor interleaves them in time
  (Qwen2.5-Omni in ``seconds_per_chunk`` chunks, Qwen3-Omni token by token); each token's id
  follows from its own modality, so the ids do not depend on the chunking;
- after an item the next id is one past its largest id. After a video with its audio it is
  one past the largest id of the modality whose token comes last (transformers' rule: the
  largest id of the last chunk), which can fall below a large frame's row or column ids.

Qwen2.5-Omni gives the two start markers before a video with its audio (vision, then audio)
one id, and the two end markers one id; Qwen3-Omni gives each its own. The ids equal
transformers' ``get_rope_index`` of each family (transformers 5.24) on the kept tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..config import check_float, check_int
from .multimodal_inputs import (
    check_distinct_ids,
    check_grid_thw,
    check_ids,
    kept_tokens,
    seconds_per_grid,
)

__all__ = ["TMROPE_FAMILIES", "tmrope"]

#: the model types whose ids :func:`tmrope` builds: whether the ids are whole numbers
#: (truncated temporal ids) and whether the markers around a video with its audio pair up
TMROPE_FAMILIES = {"qwen2_5_omni": (True, True), "qwen3_omni_moe": (False, False)}

#: the kinds of run: text (and markers), an image, a video, an audio clip, a video with its audio
TEXT, IMAGE, VIDEO, AUDIO, AV = 0, 1, 2, 3, 4


class _Tokens(NamedTuple):
    image_token_id: int
    video_token_id: int
    audio_token_id: int
    vision_start_token_id: int
    audio_start_token_id: int


def tmrope(
    input_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    *,
    image_token_id: int,
    video_token_id: int,
    audio_token_id: int,
    vision_start_token_id: int,
    audio_start_token_id: int,
    spatial_merge_size: int = 2,
    position_id_per_seconds: float = 25,
    second_per_grids: torch.Tensor | Sequence[float] | None = None,
    use_audio_in_video: bool = False,
    attention_mask: torch.Tensor | None = None,
    model_type: str = "qwen2_5_omni",
) -> tuple[torch.Tensor, torch.Tensor]:
    """TMRoPE position ids ``[3, batch, seq]`` of a batch of text, images, videos and audio.

    The rules are in the module docstring; the arguments are named as in transformers'
    Qwen2.5-Omni and Qwen3-Omni thinker configs and processor outputs.

    Args:
        input_ids: ``[batch, seq]`` token ids as the processor lays them out: each image,
            video or audio clip a run of its placeholder token after its start marker, a
            video with its audio one run of both tokens after the vision and the audio
            start markers, followed by two end markers.
        image_grid_thw, video_grid_thw: ``[n, 3]`` (t, h, w) patch grids before merging, one
            row per image / video in order of appearance, the batch's rows in turn.
        image_token_id, video_token_id, audio_token_id: the placeholder token ids.
        vision_start_token_id, audio_start_token_id: the start markers; checked to stand
            before each item, and they locate a video with its audio.
        spatial_merge_size: patches merged per side into one token.
        position_id_per_seconds: ids per second of the clock (25: 40 ms per id).
        second_per_grids: ``[n_videos]`` seconds per temporal patch of each video.
        use_audio_in_video: every video carries its audio in its own run (the processor's
            flag); without it a video and an audio clip are separate items.
        attention_mask: ``[batch, seq]`` of 0/1: tokens at 0 are skipped and get id 0.
        model_type: ``"qwen2_5_omni"`` (int64 ids, paired markers) or ``"qwen3_omni_moe"``
            (float32 ids).

    Returns:
        ``(position_ids, deltas)``: ``[3, batch, seq]`` and ``[batch, 1]`` ``max id + 1 -
        length`` per sequence (transformers' ``rope_deltas``), int64 for Qwen2.5-Omni,
        float32 for Qwen3-Omni.

    Raises:
        TypeError, ValueError: naming the argument: shapes, dtypes, unknown model types,
            token runs that do not match the grids, items without their start marker, a
            video without audio under ``use_audio_in_video``, videos without
            ``second_per_grids``.

    Example:
        >>> ids = torch.tensor([[1, 8, 5, 5, 5, 9, 2]])  # text, <audio> 3 audio tokens </audio>
        >>> ids = torch.cat([ids, torch.tensor([[7, 6, 6, 6, 6, 3]])], 1)  # <vision> image
        >>> positions, deltas = tmrope(ids, torch.tensor([[1, 4, 4]]), image_token_id=6,
        ...     video_token_id=4, audio_token_id=5, vision_start_token_id=7,
        ...     audio_start_token_id=8)
        >>> for axis in positions[:, 0].tolist():
        ...     print(axis)
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 10]
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10]
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 9, 10]
    """
    if model_type not in TMROPE_FAMILIES:
        raise ValueError(f"model_type must be one of {sorted(TMROPE_FAMILIES)}, got {model_type!r}")
    whole, paired = TMROPE_FAMILIES[model_type]
    tokens = _Tokens(
        image_token_id, video_token_id, audio_token_id, vision_start_token_id, audio_start_token_id
    )
    check_ids(input_ids, image_token_id, video_token_id, None)
    check_distinct_ids(tokens._asdict())
    check_int("spatial_merge_size", spatial_merge_size)
    check_float("position_id_per_seconds", position_id_per_seconds)
    if not isinstance(use_audio_in_video, bool):
        raise TypeError(f"use_audio_in_video must be a bool, got {use_audio_in_video!r}")
    device = input_ids.device
    mask = kept_tokens(attention_mask, input_ids)
    grids = {
        IMAGE: list(check_grid_thw("image_grid_thw", image_grid_thw, spatial_merge_size, device)),
        VIDEO: list(check_grid_thw("video_grid_thw", video_grid_thw, spatial_merge_size, device)),
    }
    steps = seconds_per_grid(second_per_grids, len(grids[VIDEO]))
    clock = _Clock(whole, paired, use_audio_in_video, position_id_per_seconds, tokens)
    dtype = torch.long if whole else torch.float32
    positions = torch.zeros(3, *input_ids.shape, dtype=dtype, device=device)
    deltas = []
    for b in range(input_ids.shape[0]):
        ids = input_ids[b][mask[b]]
        row = clock.sequence(ids, grids, steps).to(device)
        positions[:, b, mask[b]] = row
        deltas.append(row.max() + 1 - ids.numel() if ids.numel() else torch.zeros((), dtype=dtype))
    for kind, left in grids.items():
        if left:
            name = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            raise ValueError(f"{name} has {len(left)} more rows than input_ids has items")
    return positions, torch.stack(deltas).to(device, dtype).unsqueeze(1)


class _Clock(NamedTuple):
    """How one family numbers the tokens of one sequence."""

    whole: bool
    paired: bool
    audio_in_video: bool
    per_second: float
    tokens: _Tokens

    def sequence(
        self, ids: torch.Tensor, grids: dict[int, list[torch.Tensor]], steps: torch.Tensor
    ) -> torch.Tensor:
        """``[3, n]`` ids of one sequence's kept tokens (``[n]``), consuming its grids."""
        kind = self._kinds(ids)
        dtype = torch.long if self.whole else torch.float32
        out = torch.zeros(3, ids.numel(), dtype=dtype)
        repeat = torch.zeros(ids.numel(), dtype=torch.bool)  # markers sharing the previous id
        position = torch.zeros((), dtype=dtype)  # the id the next token takes
        for start, end, run in _runs(kind, self.audio_in_video):
            if run == TEXT:
                advance = (~repeat[start:end]).to(dtype)
                out[:, start:end] = position + (advance.cumsum(0) - 1)
                position = position + advance.sum()
                continue
            if run == AV and not bool((kind[start:end] == AUDIO).any()):
                raise ValueError(
                    f"use_audio_in_video is set but the video at token {start} has no audio "
                    "tokens: with the flag every video carries its audio"
                )
            self._check_start(ids, start, run)
            values, last = self._item(kind[start:end], run, grids, steps, position)
            out[:, start:end] = values
            position = last.max() + 1
            if run == AV and self.paired:  # the second start and end markers share ids
                if start < 2 or end + 2 > ids.numel():
                    raise ValueError("a video with its audio needs two markers on each side")
                repeat[end + 1] = True
                out[:, start - 1] = out[:, start - 2]
                out[:, start:end] -= 1
                position = position - 1
        return out

    def _kinds(self, ids: torch.Tensor) -> torch.Tensor:
        t = self.tokens
        kind = torch.full_like(ids, TEXT)
        for value, token in zip((IMAGE, VIDEO, AUDIO), t[:3], strict=True):
            kind[ids == token] = value
        return kind

    def _check_start(self, ids: torch.Tensor, start: int, run: int) -> None:
        """Raise unless the item at ``start`` follows its start marker(s)."""
        t = self.tokens
        vision, audio = t.vision_start_token_id, t.audio_start_token_id
        need = {IMAGE: (vision,), VIDEO: (vision,), AUDIO: (audio,), AV: (vision, audio)}[run]
        before = ids[max(0, start - len(need)) : start].tolist()
        if before != list(need):
            name = {IMAGE: "an image", VIDEO: "a video", AUDIO: "an audio clip"}.get(
                run, "a video with its audio"
            )
            raise ValueError(
                f"{name} at token {start} does not follow its start marker(s) {list(need)} "
                f"(vision_start_token_id, audio_start_token_id), got {before}"
            )

    def _item(
        self,
        kind: torch.Tensor,
        run: int,
        grids: dict[int, list[torch.Tensor]],
        steps: torch.Tensor,
        position: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[3, n]`` ids of one item's run from ``position``, and those of its
        modality whose token comes last."""
        if run == AUDIO:
            audio = position + torch.arange(kind.numel(), dtype=position.dtype).expand(3, -1)
            return audio, audio
        video = VIDEO if run == AV else run
        frames = self._frames(kind == video, video, grids, steps, position)
        if run != AV:
            return frames, frames
        n_audio = int((kind == AUDIO).sum())
        audio = position + torch.arange(n_audio, dtype=position.dtype).expand(3, -1)
        out = torch.empty(3, kind.numel(), dtype=position.dtype)
        out[:, kind == video] = frames
        out[:, kind == AUDIO] = audio
        return out, audio if int(kind[-1]) == AUDIO else frames

    def _frames(
        self,
        where: torch.Tensor,
        kind: int,
        grids: dict[int, list[torch.Tensor]],
        steps: torch.Tensor,
        position: torch.Tensor,
    ) -> torch.Tensor:
        """``[3, t·h·w]`` ids of the next image or video, frame by frame, row by row."""
        name = "image" if kind == IMAGE else "video"
        if not grids[kind]:
            raise ValueError(f"input_ids hold more {name}s than {name}_grid_thw has rows")
        index = (len(steps) - len(grids[VIDEO])) if kind == VIDEO else None
        t, h, w = (int(v) for v in grids[kind].pop(0))
        if int(where.sum()) != t * h * w:
            raise ValueError(
                f"{name} tokens: a run of {int(where.sum())}, but its {name}_grid_thw row gives "
                f"{t * h * w} (t*h*w / spatial_merge_size**2)"
            )
        frame = torch.arange(t)
        # images: frames one second apart; videos in float32, in transformers' order
        tau = frame * self.per_second if index is None else frame * steps[index] * self.per_second
        tau = tau.long() if self.whole else tau.float()
        dtype = position.dtype
        axes = (tau.to(dtype), torch.arange(h, dtype=dtype), torch.arange(w, dtype=dtype))
        return position + torch.stack([a.flatten() for a in torch.meshgrid(*axes, indexing="ij")])


def _runs(kind: torch.Tensor, audio_in_video: bool) -> list[tuple[int, int, int]]:
    """``(start, end, kind)`` of each run of one kind of token, a video's runs and its
    audio's merged into one run of kind ``AV`` when ``audio_in_video``. A run is one item:
    the processor wraps every item in its markers, so two never touch."""
    values, counts = torch.unique_consecutive(kind, return_counts=True)
    runs, start = [], 0
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        runs.append([start, start + count, value])
        start += count
    if not audio_in_video:
        return [tuple(r) for r in runs]
    merged: list[list[int]] = []
    for run in runs:
        if merged and merged[-1][2] == AV and run[2] in (VIDEO, AUDIO):
            merged[-1][1] = run[1]
        elif run[2] == VIDEO:
            merged.append([run[0], run[1], AV])
        else:
            merged.append(run)
    return [tuple(r) for r in merged]  # type: ignore[misc]
