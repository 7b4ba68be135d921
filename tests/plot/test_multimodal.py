"""posenc.plot.multimodal: M-RoPE's and TMRoPE's (t, h, w) ids of a multimodal sequence."""

import pytest
import torch

from posenc.plot.multimodal import mrope_ids

pytest.importorskip("matplotlib")


def _title(fig):
    titles = [fig._suptitle.get_text()] if fig._suptitle else []
    return " ".join(titles + [ax.get_title() for ax in fig.get_axes()])


def _image(fig):
    (ax,) = [ax for ax in fig.get_axes() if ax.get_images()]
    return ax, torch.as_tensor(ax.get_images()[0].get_array().data)


def test_mrope_ids_are_drawn():
    """text 4, image 2x3, video 2x2x2, text 4: the rules of Qwen2-VL's ids."""
    fig = mrope_ids()
    ax, data = _image(fig)
    text = [0, 1, 2, 3]
    after = [9, 10, 11, 12]
    expected = [
        text + [4] * 6 + [7] * 4 + [8] * 4 + after,
        text + [4, 4, 4, 5, 5, 5] + [7, 7, 8, 8] * 2 + after,
        text + [4, 5, 6] * 2 + [7, 8] * 4 + after,
    ]
    assert data.tolist() == expected
    assert "M-RoPE" in _title(fig) and ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["t", "h", "w"]


def test_mrope_ids_without_text():
    _, data = _image(mrope_ids(text=0, image=(1, 2), video=(1, 1, 1)))
    assert data.tolist() == [[0, 0, 2], [0, 0, 2], [0, 1, 2]]


def test_tmrope_ids_put_frames_and_sound_on_one_clock():
    """text 1, <v> image 1x2 </v>, <v><a> 2 frames of 1x2 0.12 s apart (temporal ids 0 and
    3 past the start) with 4 audio tokens heard in time </a></v>, text 1: Qwen2.5-Omni's
    rules (paired markers, audio at start + k, end markers past the last audio token)."""
    ax, data = _image(mrope_ids(text=1, image=(1, 2), video=(2, 1, 2), audio=4))
    before = [[0, 1, 2, 2, 4, 5, 5], [0, 1, 2, 2, 4, 5, 5], [0, 1, 2, 3, 4, 5, 5]]
    # frame 0 (2 tokens), its sound (3 tokens, ids 6-8), frame 1 at 6 + 3, the last sound
    inner = [[6, 6, 6, 7, 8, 9, 9, 9], [6, 6, 6, 7, 8, 6, 6, 9], [6, 7, 6, 7, 8, 6, 7, 9]]
    after = [10, 10, 11]  # the paired end markers, then text
    assert data.tolist() == [[*b, *i, *after] for b, i in zip(before, inner, strict=True)]
    assert "TMRoPE" in _title(fig := mrope_ids(audio=4)) and fig.get_axes()
    labels = [t.get_text() for t in ax.texts if not t.get_text().isdigit()]
    assert labels == ["text", "image", "video + audio", "text"]


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"text": -1}, "text"),
        ({"image": (2,)}, "image"),
        ({"image": (2, 0)}, "image"),
        ({"video": (0, 1, 1)}, "video"),
        ({"video": "abc"}, "video"),
        ({"audio": -1}, "audio"),
        ({"audio": 2, "seconds_per_frame": 0.0}, "seconds_per_frame"),
    ],
)
def test_mrope_ids_bad_input(kwargs, word):
    with pytest.raises(ValueError, match=word):
        mrope_ids(**kwargs)
