import pytest
import torch

from posenc.plot import save
from posenc.plot.permutation import permutation, permutation_outputs


def _matrices(fig):
    return [torch.as_tensor(ax.get_images()[0].get_array()) for ax in fig.get_axes()[:4]]


def _rows(fig, k):
    return [t.get_text() for t in fig.get_axes()[k].get_yticklabels()]


@pytest.mark.parametrize("encoding", ["sinusoidal", "rope", "alibi", "learned"])
def test_nope_moves_rows_an_encoding_changes_them(encoding):
    fig = permutation(encoding=encoding)
    nope, nope_shuffled, enc, enc_shuffled = _matrices(fig)
    words, shuffled_words = _rows(fig, 0), _rows(fig, 1)
    assert words == ["the", "cat", "sat", "on", "the", "mat"] and shuffled_words != words
    assert sorted(shuffled_words) == sorted(words)
    # every shuffled row is the row of a word in the same place of the original, moved
    order = [words.index(w) for w in shuffled_words]  # "the" twice: the same embedding
    torch.testing.assert_close(nope_shuffled, nope[order], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(enc_shuffled, enc[order], atol=1e-3)
    assert encoding in fig.get_axes()[2].get_title()


def test_the_images_are_the_outputs():
    fig = permutation(encoding="rope", dim=8, seed=3)
    words = ["the", "cat", "sat", "on", "the", "mat"]
    for name, k in (("nope", 0), ("rope", 2)):
        outputs = permutation_outputs(name, words, [0, 1, 2, 3, 4, 5], 8, 3)[0]
        torch.testing.assert_close(_matrices(fig)[k], outputs)


def test_writes_files(tmp_path):
    fig = permutation()
    assert save(fig, tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
    assert save(fig, tmp_path / "p.svg").stat().st_size > 0
    assert fig.get_suptitle()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"encoding": "nope"}, "takes additive or rotary or bias encodings"),
        ({"encoding": "rope_2d"}, "2-D"),
        ({"sentence": "one"}, "sentence"),
        ({"sentence": "a a a"}, "every order"),
        ({"dim": 5}, "dim"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        permutation(**kwargs)
