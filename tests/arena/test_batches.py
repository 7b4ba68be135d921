"""posenc.arena.data.batches: the byte-level vocabulary and the causal and masked LM batches."""

import pytest
import torch

from posenc.arena.data.batches import MASK_ID, MASKED_VOCAB, VOCAB_SIZE, lm_batch, masked_batch
from posenc.arena.data.corpus import load_corpus
from posenc.arena.data.tasks import IGNORE


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _as_bytes(t):
    return bytes(t.tolist())


@pytest.fixture(scope="module")
def stdlib_corpus():
    return load_corpus(max_bytes=2_000_000)


def test_vocab():
    assert VOCAB_SIZE == 256 and MASK_ID == 256 and MASKED_VOCAB == 257


def test_lm_batch_alignment():
    tokens = torch.arange(256, dtype=torch.uint8).repeat(4)  # next byte = (byte + 1) % 256
    batch = lm_batch(tokens, 8, 32, _gen())
    assert batch.inputs.shape == batch.targets.shape == (8, 32)
    assert batch.inputs.dtype == batch.targets.dtype == torch.int64
    assert torch.equal(batch.targets, (batch.inputs + 1) % 256)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert batch.scored_tokens() == 8 * 32


def test_lm_batch_windows_of_the_corpus(stdlib_corpus):
    tokens = stdlib_corpus.valid
    data = _as_bytes(tokens)
    batch = lm_batch(tokens, 4, 64, _gen(5))
    for row_in, row_t in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        window = bytes([*row_in, row_t[-1]])
        assert window in data
        assert bytes(row_t) == window[1:]


def test_lm_batch_covers_both_ends():
    tokens = torch.arange(10, dtype=torch.uint8)
    batch = lm_batch(tokens, 400, 4, _gen())
    starts = set(batch.inputs[:, 0].tolist())
    assert starts == set(range(6))  # uniform in [0, n - length - 1]


def test_batches_deterministic():
    tokens = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    for make in (lm_batch, masked_batch):
        a, b = make(tokens, 3, 50, _gen(2)), make(tokens, 3, 50, _gen(2))
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
        assert not torch.equal(a.inputs, make(tokens, 3, 50, _gen(3)).inputs)


def test_masked_batch():
    tokens = torch.arange(256, dtype=torch.uint8).repeat(8)
    batch = masked_batch(tokens, 64, 100, _gen(), mask_prob=0.15)
    assert batch.inputs.shape == batch.targets.shape == (64, 100)
    masked = batch.inputs == MASK_ID
    assert torch.equal(masked, batch.targets != IGNORE)
    # unmasked inputs are the window itself: consecutive bytes
    start = (batch.targets[:, :1] - torch.arange(1)).where(masked[:, :1], batch.inputs[:, :1])
    window = (start + torch.arange(100)) % 256
    assert torch.equal(batch.inputs.where(~masked, window), window)
    assert torch.equal(batch.targets[masked], window[masked])
    rate = masked.float().mean().item()
    assert 0.12 < rate < 0.18


def test_masked_batch_at_least_one_per_row():
    tokens = torch.randint(0, 256, (1000,), dtype=torch.uint8)
    batch = masked_batch(tokens, 200, 4, _gen(), mask_prob=0.01)
    assert ((batch.inputs == MASK_ID).sum(dim=1) >= 1).all()
    full = masked_batch(tokens, 2, 8, _gen(), mask_prob=1.0)
    assert (full.inputs == MASK_ID).all()


def test_batch_bad_arguments():
    tokens = torch.zeros(100, dtype=torch.uint8)
    with pytest.raises(ValueError, match="length"):
        lm_batch(tokens, 2, 100, _gen())  # needs length + 1 bytes
    with pytest.raises(ValueError, match="batch_size"):
        lm_batch(tokens, 0, 10, _gen())
    with pytest.raises(ValueError, match="tokens"):
        lm_batch(tokens.float(), 2, 10, _gen())
    with pytest.raises(ValueError, match="mask_prob"):
        masked_batch(tokens, 2, 10, _gen(), mask_prob=0.0)
    assert masked_batch(tokens, 2, 100, _gen()).inputs.shape == (2, 100)
    with pytest.raises(TypeError, match="length must be an int"):
        lm_batch(tokens, 2, 10.0, _gen())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch_size must be an int"):
        masked_batch(tokens, True, 10, _gen())


def test_a_batch_with_positions_gives_them_to_the_model() -> None:
    """scored_loss passes a batch's positions on: a RoPE model's loss changes with them and
    equals the loss of the model called with them; rows() keeps them with their rows."""
    import torch.nn.functional as F

    from posenc.arena.data.tasks import TaskBatch
    from posenc.arena.running.training import scored_loss
    from posenc.models import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(16, 16, 1, 2, encoding="rope")
    inputs = torch.randint(0, 16, (3, 8))
    positions = torch.arange(8).expand(3, 8) * 5
    batch = TaskBatch(inputs, inputs.roll(-1, 1), positions)
    with torch.no_grad():
        loss = scored_loss(model, batch)
        plain = scored_loss(model, TaskBatch(inputs, inputs.roll(-1, 1)))
        direct = F.cross_entropy(
            model(inputs, positions=positions).flatten(0, 1), inputs.roll(-1, 1).flatten()
        )
    assert torch.equal(loss, direct) and not torch.allclose(loss, plain)
    part = batch.rows(slice(1, 3), torch.device("cpu"))
    assert part.positions is not None and torch.equal(part.positions, positions[1:3])
    with pytest.raises(ValueError, match="positions"):
        TaskBatch(inputs, inputs, positions[:, :4])
