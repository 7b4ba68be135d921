"""Why attention needs positions: the outputs for a sentence and for its shuffle.

Self-attention without positions is permutation-equivariant (Vaswani et al. 2017,
arXiv:1706.03762; without a causal mask): shuffling the tokens only moves the output rows,
so "the cat sat on the mat" and "mat the on sat cat the" are the same bag of words. With a
positional encoding the rows themselves change. The figure computes one attention layer
(a fixed random embedding and projection, no causal mask) four times: ``nope`` and the given
encoding, each on the sentence and on a fixed shuffle of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .. import registry
from ..attn import attention
from ..base import AdditiveEncoding
from .common import check_encoding, check_size, config_keys, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["permutation", "permutation_outputs"]

_KINDS = ("additive", "rotary", "bias")


def permutation_outputs(
    encoding: str, words: list[str], order: list[int], dim: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention layer's outputs for ``words`` and for ``words`` in ``order``.

    Each distinct word gets a fixed random embedding and q, k, v come from fixed random
    projections (all drawn from ``seed``); an additive encoding is added to the embeddings,
    a rotary or bias one is applied inside attention (one head, no causal mask).

    Returns:
        ``(outputs, shuffled)``, each ``[len(words), dim]``: row r of ``shuffled`` is the
        output for the word ``words[order[r]]``.
    """
    gen = torch.Generator().manual_seed(seed)
    vocab = sorted(set(words))
    table = torch.randn(len(vocab), dim, generator=gen)  # [vocab, dim]
    w_q, w_k, w_v = (torch.randn(dim, dim, generator=gen) / dim**0.5 for _ in range(3))
    torch.manual_seed(seed)  # learned encodings: the same initialisation every time
    enc = None if encoding == "nope" else _create(encoding, dim)
    results = []
    for ids in ([vocab.index(w) for w in words], [vocab.index(words[i]) for i in order]):
        x = table[ids]  # [seq, dim]
        if isinstance(enc, AdditiveEncoding):
            x = x + enc.encode(torch.arange(len(ids)))
        q, k, v = (
            (x @ w).view(1, 1, len(ids), dim) for w in (w_q, w_k, w_v)
        )  # [batch 1, heads 1, seq, dim]
        rotary_or_bias = None if isinstance(enc, AdditiveEncoding) else enc
        with torch.no_grad():
            out = attention(q, k, v, rotary_or_bias, causal=False)
        results.append(out[0, 0])  # [seq, dim]
    return results[0], results[1]


def _create(encoding: str, dim: int) -> Any:
    """``encoding`` for one head of size ``dim`` (each kind has its own size key)."""
    keys = config_keys(encoding)
    sizes = {"dim": dim, "head_dim": dim, "n_heads": 1}
    return registry.create(encoding, **{k: v for k, v in sizes.items() if k in keys})


def permutation(
    encoding: str = "sinusoidal",
    sentence: str = "the cat sat on the mat",
    dim: int = 16,
    seed: int = 0,
) -> Figure:
    """Attention outputs of ``sentence`` and its shuffle, without positions and with ``encoding``.

    Args:
        encoding: a 1-D additive, rotary or bias encoding (``sinusoidal``, ``rope``,
            ``alibi``...); learned ones at their initialisation.
        sentence: at least two words, split on spaces.
        dim: the embedding and head size (even).
        seed: the seed of the embeddings, the projections and the shuffle.

    Returns:
        The figure: four panels, each an image of a ``[words, dim]`` output matrix: nope on
        the sentence, nope on the shuffle, ``encoding`` on the sentence, on the shuffle.
        The rows of the shuffle are labelled with their words: with nope they are the same
        rows as before, moved; with a positional encoding they differ.

    Raises:
        ValueError: for a bad value (naming the parameter) or an encoding of another kind.
    """
    info = check_encoding(encoding, _KINDS, "permutation")
    if not isinstance(sentence, str) or len(sentence.split()) < 2:
        raise ValueError(f"sentence must have at least two words, got {sentence!r}")
    check_size("dim", dim, minimum=2, even=True)
    check_size("seed", seed, minimum=0)
    words = sentence.split()
    order = _shuffle(words, seed)

    panels = []
    for name in ("nope", encoding):
        outputs, shuffled = permutation_outputs(name, words, order, dim, seed)
        shuffled_words = [words[i] for i in order]
        panels.append((f"{name}: the sentence", outputs, words))
        panels.append((f"{name}: shuffled", shuffled, shuffled_words))
    state = " (at initialisation)" if info.trainable else ""
    fig, axes = new_figure(
        4,
        f"attention outputs without positions (nope) and with {encoding}{state}: "
        "nope only moves the rows",
        width=3.6,
        height=3.8,
    )
    limit = max(float(m.abs().max()) for _, m, _ in panels)
    images = []
    for ax, (title, matrix, labels) in zip(axes, panels, strict=True):
        images.append(
            ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        )
        ax.set_title(title)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("output dimension")
        ax.set_ylabel("token")
    fig.colorbar(images[0], ax=axes, label="attention output", shrink=0.8)
    return fig


def _shuffle(words: list[str], seed: int) -> list[int]:
    """A fixed shuffle of ``words`` (indices) that changes their order."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(100):
        order = torch.randperm(len(words), generator=gen).tolist()
        if [words[i] for i in order] != words:
            return order
    raise ValueError(f"sentence {' '.join(words)!r} reads the same in every order: use other words")
