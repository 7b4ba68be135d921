"""TransformerLM on real batches: packed documents, left-padded prompts, rows of padding.

Parametrized over every registered encoding of token sequences (``position_axes == 1``),
so a new one is checked the moment it registers. Logits are compared within
``model_tol`` (tests/conftest.py: float32 rounding counted through the layers' reductions),
gradients within ``tol`` over the sums a parameter's gradient takes; a leak between
documents moves both by a visible fraction of their size.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.models import TransformerLM, next_positions

VOCAB, DIM, LAYERS, HEADS = 37, 32, 2, 4
SEQUENCE_NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]


def model(name: str, sharpen) -> TransformerLM:
    lm = TransformerLM(vocab_size=VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, encoding=name)
    with torch.no_grad():  # encoding parameters away from their (often zero) initial values
        for p in lm.encoding.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return sharpen(lm)


@pytest.mark.parametrize("name", SEQUENCE_NAMES)
def test_packed_documents_equal_each_document_alone(name, sharpen, model_tol, tol):
    """Logits and gradients: a row ``[doc 5, doc 7, pad 2]`` with segment ids and a padding
    mask gives each document what it gets alone, and the same parameter gradients."""
    lm = model(name, sharpen)
    docs = [torch.randint(0, VOCAB, (1, n)) for n in (5, 7)]
    pads = torch.zeros(1, 2, dtype=torch.long)
    packed = torch.cat([*docs, pads], dim=1)
    segments = torch.tensor([[0] * 5 + [1] * 7 + [2] * 2])
    real = torch.tensor([[1] * 12 + [0] * 2])

    logits = lm(packed, attention_mask=real, segment_ids=segments)
    loss = logits[0, :12].logsumexp(-1).sum()  # any function of the real tokens' logits
    packed_grads = torch.autograd.grad(loss, list(lm.parameters()), allow_unused=True)

    start, loss_alone = 0, 0
    for doc in docs:
        n = doc.shape[1]
        alone = lm(doc)
        assert_close(logits[:, start : start + n], alone, **model_tol(lm, 14, logits))
        loss_alone = loss_alone + alone[0].logsumexp(-1).sum()
        start += n
    alone_grads = torch.autograd.grad(loss_alone, list(lm.parameters()), allow_unused=True)
    n = 14 * model_tol(lm, 14, logits)["rtol"] / torch.finfo(torch.float32).eps
    largest = max(h.abs().max().item() for h in alone_grads if h is not None)
    for (pname, _), g, h in zip(lm.named_parameters(), packed_grads, alone_grads, strict=True):
        if g is None or h is None:
            assert g is None and h is None, pname
            continue
        # a gradient sums the logits' rounding over every token: model_tol's count times 14,
        # of terms the size of the largest gradient (some sum to ~0: FIRE's output bias)
        assert_close(g, h, **tol(n=n, scale=largest), msg=pname)


@pytest.mark.parametrize("name", SEQUENCE_NAMES)
def test_left_padded_batch_generates_what_each_prompt_generates_alone(name, sharpen):
    lm = model(name, sharpen).eval()
    prompts = [torch.randint(1, VOCAB, (1, n)) for n in (3, 6, 4)]
    width = max(p.shape[1] for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        batch[i, width - p.shape[1] :] = p
        mask[i, width - p.shape[1] :] = 1
    out = lm.generate(batch, 5, attention_mask=mask)
    assert torch.equal(out, lm.generate(batch, 5, attention_mask=mask, use_cache=False))
    for i, p in enumerate(prompts):
        assert torch.equal(out[i, width - p.shape[1] :], lm.generate(p, 5)[0]), i


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5", "learned", "shaw"])
def test_a_row_of_padding_gives_no_nan(name, sharpen):
    lm = model(name, sharpen)
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1] = 0  # all padding
    mask[0, :2] = 0  # left padding
    logits = lm(ids, attention_mask=mask)
    assert torch.isfinite(logits).all()
    logits[0, 2:].logsumexp(-1).sum().backward()
    for pname, p in lm.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), pname


def test_cached_steps_take_the_whole_mask(model_tol):
    """With a cache, ``attention_mask`` covers the cached tokens and the new ones."""
    lm = TransformerLM(vocab_size=VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, encoding="rope")
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        full = lm(ids, attention_mask=mask)
        cache = lm.new_cache(2, 6)
        steps = [lm(ids[:, :4], cache=cache, attention_mask=mask[:, :4])]
        steps += [lm(ids[:, 4:], cache=cache, attention_mask=mask)]
    rounding = model_tol(lm, 6, full)
    assert_close(torch.cat(steps, dim=1)[0, 2:], full[0, 2:], **rounding)
    assert_close(torch.cat(steps, dim=1)[1], full[1], **rounding)
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, past \+ seq\]"):
        lm(ids[:, :1], cache=lm.new_cache(2, 6), attention_mask=mask)


def test_generate_continues_mrope_ids_after_the_largest():
    """An M-RoPE prompt with an image: each new token takes the next text id after the
    prompt's largest (``n + delta``), as stepping by hand with those ids does."""
    lm = TransformerLM(vocab_size=VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, encoding="mrope")
    lm.eval()
    image = 36
    ids = torch.tensor([[1, 2, image, image, image, image, 3, 4]])
    positions, delta = posenc.positions.multimodal(
        ids, torch.tensor([[1, 4, 4]]), image_token_id=image, video_token_id=35
    )
    out = lm.generate(ids, 3, positions=positions)
    assert torch.equal(out, lm.generate(ids, 3, positions=positions, use_cache=False))
    tokens, pos = ids, positions
    with torch.no_grad():
        for n in range(8, 11):
            nxt = lm(tokens, positions=pos)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat((tokens, nxt), dim=1)
            pos = torch.cat((pos, torch.full((3, 1, 1), n + delta.item())), dim=-1)
    assert torch.equal(out, tokens)
    assert next_positions(positions)[:, 0, 0].tolist() == [8 + delta.item()] * 3


def test_a_reused_segment_id_is_refused_with_explicit_positions_too():
    """With positions that restart per document, an id used by two documents would let a
    token see a later one of the same id: refused whoever computes the positions."""
    lm = TransformerLM(vocab_size=VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, encoding="rope")
    ids = torch.randint(0, VOCAB, (1, 5))
    segments = torch.tensor([[0, 0, 1, 0, 0]])
    with pytest.raises(ValueError, match="an id reappears"):
        lm(ids, segment_ids=segments)
    with pytest.raises(ValueError, match="an id reappears"):
        lm(ids, positions=torch.tensor([[0, 1, 0, 0, 1]]), segment_ids=segments)
