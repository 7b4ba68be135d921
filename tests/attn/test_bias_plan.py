"""plan_bias: the one choice of a bias backend, runner by runner in the situations its table
names; and the context a model builds once per forward for every layer."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch

import posenc
from posenc.attn import AttentionContext, Masks, dispatch
from posenc.attn import masks as masks_module
from posenc.attn import planner as plan_module
from posenc.attn.planner import AttnShape, plan_bias, shares_table
from posenc.attn.runners.flex import flex_available
from posenc.base import InputTransforms, ScoreBias, ScoreWeights
from posenc.builder import build
from posenc.models import TransformerLM

CPU = torch.device("cpu")


def plan(name, length=300, *, q_len=None, explicit=False, masked=False, grad=False, **kw):
    """The plan for ``name`` (8 heads of 64) over ``length`` keys on the CPU."""
    config = {"name": name, "n_heads": 8, **kw.pop("config", {})}
    if name == "shaw":
        config.setdefault("head_dim", 64)
    enc = posenc.create(config.pop("name"), **config)
    q_len = length if q_len is None else q_len
    given = torch.arange(length - q_len, length) if explicit else None
    keys = torch.arange(length) if explicit else None
    context = AttentionContext.build(q_len, length, 1, CPU, q_positions=given, k_positions=keys)
    shape = AttnShape(1, 8, 8, q_len, length, 64)
    return plan_bias(
        enc,
        shape,
        context.positions,
        masked=masked,
        causal=kw.pop("causal", True),
        needs_grad=grad,
        device=kw.pop("device", CPU),
        backend=kw.pop("backend", "auto"),
        table_given=kw.pop("table_given", False),
    )


def test_inference_on_the_cpu():
    assert plan("t5").runner == "distance"  # shift-invariant over default positions
    flex_or_sdpa = "flex" if flex_available(CPU) else "sdpa"
    assert plan("t5", explicit=True).runner == "rows"  # a bias of the positions alone
    assert plan("t5", q_len=1).runner == "sdpa"  # a decode step: not q_len == k_len
    assert plan("fire").runner == "rows"  # not shift-invariant
    assert plan("fire", masked=True).runner == flex_or_sdpa
    assert plan("fire", 16, masked=True).runner == "sdpa"  # below FLEX_MIN_SCORES
    assert plan("alibi").runner == "distance"  # shift-invariant first: the floor's own width
    alibi = plan("alibi", explicit=True)
    assert alibi.runner == "linear"
    assert alibi.slopes == posenc.create("alibi", n_heads=8).slopes().tolist()
    steep = plan("alibi", explicit=True, config={"slopes": [100.0] * 8})  # too wide to fuse
    assert steep.runner == flex_or_sdpa
    # masks: flex skips whole blocks; without it the fused path takes the dense mask
    assert plan("alibi", masked=True).runner == ("flex" if flex_available(CPU) else "linear")


def test_training_on_the_cpu():
    assert plan("t5", grad=True) == plan_module.Plan("distance")
    assert plan("alibi", grad=True) == plan_module.Plan("distance")
    assert plan("t5", grad=True, explicit=True).runner == "rows"
    assert plan("fire", grad=True).runner == "rows"
    # a table handed in (a model's, shared by its layers) runs on the flash kernel
    shared = plan("fire", grad=True, table_given=True)
    assert shared == plan_module.Plan("flash", "full")
    assert plan("alibi", grad=True, explicit=True).runner == "linear"
    assert plan("shaw", grad=True, config={"values": True}).runner == "shaw"
    reversed_order = plan("shaw", 40, grad=True, masked=True)
    assert reversed_order.runner == "flash"  # masks: not the blockwise Shaw path


def test_values_take_the_math_path_and_refuse_other_backends():
    values = {"values": True}
    assert plan("shaw", config=values).runner == "shaw"  # blockwise, the values term too
    assert plan("shaw", config=values, masked=True) == plan_module.Plan("math", "full")
    with pytest.raises(ValueError, match="only backend='math' runs it"):
        plan("shaw", config={"values": True}, backend="sdpa")


def test_explicit_backends():
    assert plan("t5", backend="sdpa").runner == "sdpa"
    assert plan("alibi", backend="math").runner == "math"
    assert plan("t5", backend="flex").runner == "flex"
    with pytest.raises(ValueError, match="no backward on the CPU"):
        plan("t5", backend="flex", grad=True)


def test_other_devices_materialise_or_take_flex():
    meta = torch.device("meta")
    assert plan("alibi", device=meta).runner == "sdpa"  # the fused path is measured on CPU
    assert plan("t5", grad=True, device=meta).runner == "sdpa"


def test_a_model_shares_a_table_training_on_the_cpu_without_a_cache():
    t5, shaw = posenc.create("t5", n_heads=8), posenc.create("shaw", n_heads=8, head_dim=64)
    assert shares_table(t5, training=True, cached=False, device=CPU)
    assert not shares_table(t5, training=False, cached=False, device=CPU)
    assert not shares_table(t5, training=True, cached=True, device=CPU)
    assert not shares_table(t5, training=True, cached=False, device=torch.device("meta"))
    assert not shares_table(shaw, training=True, cached=False, device=CPU)  # needs q


def test_the_context_builds_its_dense_mask_once():
    real = torch.ones(2, 5, dtype=torch.bool)
    real[0, 0] = False
    context = AttentionContext.build(5, 5, 2, CPU, key_padding_mask=real)
    first = context.allowed(causal=True)
    assert context.allowed(causal=True) is first
    assert context.allowed(causal=False) is not first
    mask, dead = first
    assert mask.shape == (2, 1, 5, 5) and dead[0, 0, 0, 0]  # the pad query sees no key


#: 300: past FLEX_MIN_SCORES, flex where it runs (its compile about 5 s on a cold cache:
#: ALiBi's in ``make test-slow``)
PLAN_CASES = [
    (name, length)
    if (name, length) != ("alibi", 300)
    else pytest.param(name, length, marks=pytest.mark.slow)
    for name in ("t5", "alibi", "rope")
    for length in (9, 300)
]


@pytest.mark.parametrize(("name", "length"), PLAN_CASES)
def test_a_model_builds_one_context_and_one_mask_per_forward(name, length, monkeypatch):
    built, dense, blocks = [], [], []
    real_build, real_dense = AttentionContext.build.__func__, Masks.dense
    real_blocks = masks_module.flex_block_mask
    monkeypatch.setattr(
        AttentionContext,
        "build",
        classmethod(lambda cls, *a, **kw: built.append(1) or real_build(cls, *a, **kw)),
    )
    monkeypatch.setattr(Masks, "dense", lambda self, *a: dense.append(1) or real_dense(self, *a))
    monkeypatch.setattr(
        masks_module, "flex_block_mask", lambda *a: blocks.append(1) or real_blocks(*a)
    )
    model = TransformerLM(64, 32, 3, 4, name)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[0, :2] = 0
    with torch.no_grad():
        model(torch.randint(0, 64, (2, length)), attention_mask=mask)
    assert built == [1]  # not one per layer
    assert len(dense) + len(blocks) == 1  # the dense mask or flex's block mask, once


def test_a_bias_flex_cannot_differentiate_trains_on_the_materialised_table():
    """FIRE's score_mod indexes its MLP's weights once per hidden unit, which inductor's
    flex backward refuses (measured on an H200): with a backward, ``auto`` materialises
    the bias wherever flex would run, and ``backend="flex"`` names the way out."""
    from posenc.attn.planner import plan
    from posenc.positions import AttnPositions

    fire = posenc.create("fire", n_heads=2)
    shape = AttnShape(1, 2, 2, 512, 512, 16)
    positions = AttnPositions.build(512, 512, 1, torch.device("cpu"))
    cuda = torch.device("cuda")
    kwargs = dict(masked=False, causal=True, device=cuda, backend="auto")
    with patch("posenc.attn.planner.flex_available", return_value=True):
        assert plan(fire, shape, positions, needs_grad=False, **kwargs).runner == "flex"
        assert plan(fire, shape, positions, needs_grad=True, **kwargs).runner == "sdpa"
        kwargs["backend"] = "flex"
        with pytest.raises(ValueError, match="cannot differentiate 'fire'"):
            plan(fire, shape, positions, needs_grad=True, **kwargs)


#: the bias encodings whose table a score_mod computes (FoX's clock comes from the layer's
#: input, handed in by the model: ``tests/cuda`` checks its runner on the device)
SCORE_MOD = [n for n in posenc.available() if posenc.registry.get(n).kind == "bias" and n != "fox"]


@pytest.mark.parametrize("name", SCORE_MOD)
@pytest.mark.parametrize("masked", [False, True])
def test_cuda_runs_flex_with_no_cpu_only_runner(name, masked):
    """The planner's CUDA row: over 512 keys a bias encoding runs flex attention's
    score_mod/mask_mod, never a runner written for the CPU (shaw, distance, rows, linear,
    flash). The exceptions, by what the encodings declare: CoPE's gates depend on q·k
    (the ``scores`` runner), stick-breaking's weights are not a softmax (``weights``),
    PaTH's scores pass through transforms (``path``), and
    FIRE trains on the materialised table (the test above)."""
    from posenc.positions import AttnPositions

    extra = {"head_dim": 64} if name in ("shaw", "cope") else {}
    extra = {"head_dim": 64, "dim": 16} if name == "path" else extra
    enc = posenc.create(name, n_heads=8, **extra)
    shape = AttnShape(1, 8, 8, 512, 512, 64)
    positions = AttnPositions.build(512, 512, 1, CPU)
    cuda = torch.device("cuda")
    with patch("posenc.attn.planner.flex_available", return_value=True):
        for grad in (False, True):
            runner = plan_module.plan(
                enc, shape, positions, masked=masked, needs_grad=grad, device=cuda
            ).runner
            expected = "flex"
            if isinstance(enc, ScoreBias):
                expected = "scores"
            if isinstance(enc, ScoreWeights):
                expected = "weights"
            if isinstance(enc, InputTransforms):  # PaTH: its scores through the transforms
                expected = "path"
            if name == "fire" and grad:
                expected = "sdpa"
            assert runner == expected, (name, masked, grad, runner)


def test_a_plan_is_decided_once_per_encoding_shapes_and_flags():
    """posenc.attention's plan over the default positions is kept (with the encoding, or for
    plain attention in the planner) and decided anew for other shapes, a new config or a
    call with a backward."""
    import dataclasses

    from posenc.attn.call import PLAIN, Call

    q = torch.randn(1, 2, 8, 16)
    enc = posenc.create("alibi", n_heads=2)

    def call_of(encoding, q=q, causal=True):
        context = AttentionContext.default(q.shape[2], q.shape[2], 1, q.device)
        return Call(q, q, q, encoding, context, causal, 0.25, "auto", None, PLAIN, True)

    with torch.no_grad():
        first = dispatch.plan_of(call_of(enc))
        assert dispatch.plan_of(call_of(enc)) is first
        assert dispatch.plan_of(call_of(enc, causal=False)) is not first
        assert dispatch.plan_of(call_of(None)) is dispatch.plan_of(call_of(None))
        enc.config = dataclasses.replace(enc.config, symmetric=True)
        again = dispatch.plan_of(call_of(enc))
        assert again is not first and again == first  # decided anew, the same decision
    grad = q.clone().requires_grad_(True)
    assert dispatch.plan_of(call_of(enc, grad)) is not dispatch.plan_of(call_of(enc, grad))


@pytest.mark.parametrize(
    "name", [None, *(n for n in posenc.available() if posenc.info(n).kind == "bias")]
)
def test_keys_the_plan_reads_alike_share_its_plan(name):
    """plan_of keeps a plan under plan_shape, which reads of the key length only how it
    compares with the query length and the flex threshold: every key length of one key
    gets the plan that plan() decides for it afresh (a decode step's growing keys share
    one), across the thresholds a row reads."""
    enc = None if name is None else build(name, dim=512, n_heads=8, head_dim=64, kv_heads=8)
    flex = plan_module.FLEX_MIN_SCORES
    for q_len in (1, 4, 256):
        lengths = {q_len, q_len + 1, q_len + 9, 2 * q_len + 3}  # default positions: k >= q
        lengths |= {flex // q_len - 1, flex // q_len, flex // q_len + 1, flex // q_len + 2}
        groups: dict[tuple, list] = {}
        for k_len in sorted(n for n in lengths if n >= q_len):
            context = AttentionContext.default(q_len, k_len, 1, CPU)
            shape = AttnShape(1, 8, 8, q_len, k_len, 64)
            try:
                chosen = plan_module.plan(
                    enc, shape, context.positions, masked=False, needs_grad=False, device=CPU
                )
            except ValueError as error:  # refused: the refusal is the decision
                chosen = str(error)
            groups.setdefault(plan_module.plan_shape(shape), []).append(chosen)
        assert all(p == plans[0] for plans in groups.values() for p in plans), (q_len, groups)
        assert len(groups) >= 2  # at and above the query length (and the threshold): apart
