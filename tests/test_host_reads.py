"""Host reads: a TransformerLM forward reads tensor values on the host once (its entry
checks), never per layer; the switch that turns value checks off; the batch that makes
many checks one read; and what the layers do instead of reading (zeroing a token's
non-finite keys and values, so that it reaches no row that may not see it).

A host read is counted as a call of ``item``, ``tolist``, ``__bool__``, ``__int__``,
``__float__``, ``__index__`` or ``nonzero`` on a tensor (each one a device sync on a GPU),
with a :class:`torch.overrides.TorchFunctionMode`.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode

import posenc
from posenc.host_reads import batched, read, read_now
from posenc.models import LayerPlan, LayerSpec, TransformerLM

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero"}
NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
VOCAB, DIM, LAYERS, HEADS = 64, 32, 4, 2


class CountReads(TorchFunctionMode):
    """Counts host reads, keeping where each came from (the innermost posenc frame)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            frames = [f for f in traceback.extract_stack() if "/posenc/" in f.filename]
            self.sites.append(" < ".join(f"{f.name}" for f in reversed(frames)))
        return func(*args, **(kwargs or {}))


def reads(fn) -> list[str]:
    with CountReads() as counter:
        fn()
    return counter.sites


def device_reads(sites: list[str]) -> list[str]:
    """The reads but FIRE's pruning of its MLP to its inputs' range, which reads the bound
    on the CPU in eager mode only (where a read stalls no stream; elsewhere it runs the
    whole MLP: tested below)."""
    return [s for s in sites if "_within" not in s]


def lm(name: str | None = None, plan: LayerPlan | None = None) -> TransformerLM:
    torch.manual_seed(0)
    if plan is not None:
        return TransformerLM(VOCAB, DIM, len(plan), HEADS, plan=plan)
    return TransformerLM(VOCAB, DIM, LAYERS, HEADS, encoding=name)


def padded() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[0, :5] = 0
    return ids, mask


PLAN = LayerPlan(
    [
        LayerSpec("rope", window=5, sinks=True),
        LayerSpec("alibi", chunk=8, softcap=30.0),
        LayerSpec("t5", window=7),
        LayerSpec(None, sinks=True),
    ]
)


@pytest.mark.parametrize("name", NAMES)
def test_a_forward_reads_the_host_once(name):
    """No mask, a left-padding mask, and a cached decode step: one read each (the entry
    checks), none per layer. Before the reads were gathered: 9 to 33 per forward."""
    model = lm(name)
    ids, mask = padded()
    assert len(device_reads(reads(lambda: model(ids)))) == 1
    assert len(device_reads(reads(lambda: model(ids, attention_mask=mask)))) == 1
    cache = model.new_cache(2, 32)
    model(ids[:, :8], cache=cache)
    assert len(device_reads(reads(lambda: model(ids[:, 8:9], cache=cache)))) == 1


def test_a_layer_plan_and_documents_read_the_host_once():
    model = lm(plan=PLAN)
    ids, mask = padded()
    segments = torch.tensor([[0] * 10 + [1] * 14, [0] * 24])
    assert len(reads(lambda: model(ids, attention_mask=mask))) == 1
    assert len(reads(lambda: model(ids, segment_ids=segments))) == 1
    assert len(reads(lambda: model(ids, torch.arange(24) * 2))) == 1


def test_fire_reads_nothing_where_a_read_would_stall():
    """On the meta device (as on a GPU and under compile) FIRE runs its whole MLP: no
    read at all; on the CPU in eager mode it reads its inputs' bound to prune it."""
    model = lm("fire")
    ids = torch.randint(0, VOCAB, (2, 24))
    assert [s for s in reads(lambda: model(ids)) if "_within" in s]  # the CPU pruning
    meta = lm("fire").to("meta")
    assert reads(lambda: meta(ids.to("meta"))) == []


def test_a_static_cache_decode_step_reads_the_host_once():
    model = lm("alibi")
    ids = torch.randint(0, VOCAB, (2, 12))
    cache = model.new_cache(2, 16, static=True)
    model(ids[:, :8], cache=cache)
    assert len(reads(lambda: model(ids[:, 8:9], cache=cache))) == 1


def test_validation_off_reads_nothing_and_is_restored():
    model = lm("rope")
    ids, mask = padded()
    with posenc.validation(False):
        assert not posenc.validation_enabled()
        assert reads(lambda: model(ids, attention_mask=mask)) == []
        assert reads(lambda: posenc.attention(*torch.randn(3, 1, 2, 4, 8))) == []
    assert posenc.validation_enabled()
    with pytest.raises(ValueError, match="input_ids must be in"):
        model(torch.full((1, 3), VOCAB))
    with pytest.raises(TypeError, match="enabled must be a bool"):
        posenc.set_validation("no")
    posenc.set_validation(False)
    try:
        assert not posenc.validation_enabled()
    finally:
        posenc.set_validation(True)


def test_checks_in_a_batch_are_one_read_and_still_raise():
    values = []
    seen = reads(lambda: _two_reads(values))
    assert len(seen) == 1
    assert values == [[-(2**62), 2**62 + 1], [0.25, -1.5]]  # int64 halves are exact
    model = lm("learned")
    with pytest.raises(posenc.PositionOutOfRangeError):
        model(torch.zeros(1, 3, dtype=torch.long), torch.tensor([0, 1, 10**6]))


def _two_reads(values):
    with batched():
        read(torch.tensor([-(2**62), 2**62 + 1]), values.append)
        read(torch.tensor([0.25, -1.5]), values.append)
        assert values == []


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "fox", "nope"])
def test_a_nan_token_reaches_no_earlier_row_in_a_model(name):
    """A token whose embedding is NaN: its own logits are NaN, and no earlier token's are
    touched (its keys and values are zeroed before attention, with no host read)."""
    model = lm(name)
    ids = torch.randint(1, VOCAB, (1, 10))
    ids[0, 6] = 0
    with torch.no_grad():
        model.embed.weight[0] = float("nan")
        logits = model(ids)
    assert torch.isfinite(logits[0, :6]).all()
    assert torch.isnan(logits[0, 6]).all()


@pytest.mark.parametrize("static", [False, True], ids=["rolling", "static"])
def test_a_plan_decode_step_with_padding_reads_the_host_once(static):
    """Windows and chunks keep rolling buffers (or rings) of their last keys, with a
    left-padding mask: still the one read of the entry checks per step."""
    model = lm(plan=PLAN).eval()
    ids, mask = padded()
    cache = model.new_cache(2, 32, static=static)
    full = torch.cat([mask, mask.new_ones(2, 8)], dim=1)  # every slot of a static cache
    with torch.no_grad():
        model(ids[:, :20], cache=cache, attention_mask=full if static else mask[:, :20])
        step_mask = full if static else mask[:, :21]
        step = reads(lambda: model(ids[:, 20:21], cache=cache, attention_mask=step_mask))
    assert len(step) == 1


@pytest.mark.parametrize(
    ("values", "then", "error", "match"),
    [
        (torch.tensor([1 + 2j]), list, TypeError, "values must be a tensor of a real dtype"),
        ([1, 2], list, TypeError, "values must be a tensor .* got list"),
        (None, list, TypeError, "values must be a tensor .* got NoneType"),
        (torch.tensor([1]), "print", TypeError, "then must be callable"),
        (torch.tensor([1], device="meta"), list, ValueError, "values are on the meta device"),
    ],
)
@pytest.mark.parametrize("reader", [read, read_now])
def test_read_names_what_it_cannot_read(reader, values, then, error, match):
    """A complex tensor was read as its real part (``[1]``), a list failed on ``.device``:
    each is refused at the call, also inside a batch, and the batch reads the rest."""
    with pytest.raises(error, match=match):
        reader(values, then)
    got = []
    with batched():
        with pytest.raises(error, match=match):
            reader(values, then)
        read(torch.tensor([True, False]), got.append)
    assert got == [[1, 0]]


def test_validation_checks_its_argument_at_the_call():
    """``posenc.validation("no")`` is refused where it is written, not when (or if) a
    ``with`` enters the block: a switch built and kept for later is checked too."""
    with pytest.raises(TypeError, match="enabled must be a bool"):
        posenc.validation("no")
    assert posenc.validation_enabled()
