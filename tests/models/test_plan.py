"""Layer plans: LayerSpec and LayerPlan (checks, constructors against transformers' layer
conventions, the printed table), and TransformerLM with a plan against the same model
written out layer by layer, with its shared tables, training, cached decoding, attention
maps and errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attn.masks import FULL, AttnPattern
from posenc.attn.temperature import QueryTemperature
from posenc.models import LayerPlan, LayerSpec, TransformerLM, attention_maps
from posenc.models import shared as shared_module

VOCAB, DIM, HEADS, KV_HEADS, SEQ = 41, 32, 4, 2, 12
#: a temperature that changes the queries within SEQ positions (Llama 4's waits 8192)
WARM = QueryTemperature(floor_scale=3, attn_scale=0.5)

#: one plan of each family, with windows and chunks short enough to matter at SEQ tokens
PLANS = {
    # Llama 4: RoPE and chunked attention on 3 of 4 layers, NoPE + temperature on the 4th
    "llama4": LayerPlan.nope_every(4, 4, "rope", chunk=4, temperature=WARM),
    # Cohere2: RoPE and a sliding window on 3 of 4, a global NoPE layer
    "cohere2": LayerPlan.local_global(4, 4, window=3, local="rope", global_="nope"),
    # Gemma 2/3: local layers with one RoPE base and a window, global ones with another;
    # every score softcapped
    "gemma": LayerPlan.local_global(
        4,
        (2, 1),
        window=3,
        local={"name": "rope", "base": 10.0},
        global_={"name": "rope", "base": 10_000.0},
        softcap=2.0,
    ),
    # gpt-oss: even layers banded, sinks everywhere; ALiBi in two of the layers
    "gpt-oss": LayerPlan(
        [
            LayerSpec("alibi", window=3, sinks=True),
            LayerSpec("rope", sinks=True),
            LayerSpec("rope", window=3, sinks=True),
            LayerSpec("alibi", sinks=True),
        ]
    ),
    # an additive encoding at the input under ALiBi and NoPE layers
    "input": LayerPlan(
        [LayerSpec("alibi", chunk=5), LayerSpec(None), LayerSpec("alibi"), LayerSpec(None)],
        input="sinusoidal",
    ),
}


def plan_model(plan, causal=True, **kwargs):
    """A model of ``plan`` with sharp attention (large q/k/v weights) and random sinks, so
    that a wrong mask, rotation, bias, cap or sink shows in the logits."""
    model = TransformerLM(VOCAB, DIM, len(plan), HEADS, n_kv_heads=KV_HEADS, causal=causal,
                          plan=plan, **kwargs)  # fmt: skip
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.normal_(std=0.3)
            if block.attn.sinks is not None:
                block.attn.sinks.normal_()
    return model


# -- the plans ----------------------------------------------------------------------------


def test_a_spec_checks_and_normalises_its_fields():
    spec = LayerSpec("none", window=4, temperature=True)
    assert spec.encoding is None and spec.pattern == AttnPattern(window=4)
    assert spec.query_temperature == QueryTemperature(8192, 0.1)
    assert LayerSpec("rope", temperature=False).query_temperature is None
    config = {"name": "rope", "base": 500.0}
    spec = LayerSpec(config)
    config["base"] = 7.0  # the spec keeps its own copy
    assert spec.encoding == {"name": "rope", "base": 500.0}
    assert LayerSpec("rope", softcap=30).softcap == 30.0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"encoding": "sinusoidal"}, ValueError, r"additive encodings go at the input: Layer"),
        ({"encoding": "no-such"}, ValueError, "unknown encoding 'no-such'"),
        ({"encoding": 3}, TypeError, "encoding must be a name"),
        ({"encoding": {"base": 2.0}}, ValueError, "needs a 'name' key"),
        ({"window": 0}, ValueError, "window must be >= 1"),
        ({"window": 2.5}, TypeError, "window must be an int"),
        ({"chunk": 4, "window": 2}, ValueError, "two patterns"),
        ({"sinks": 1}, TypeError, "sinks must be a bool"),
        ({"softcap": 0.0}, ValueError, "softcap must be a finite number > 0"),
        ({"temperature": 2}, TypeError, "temperature must be a bool or a QueryTemperature"),
    ],
)
def test_a_spec_names_the_bad_field(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LayerSpec(**{"encoding": "rope", **kwargs})


def test_a_plan_names_the_bad_layer():
    with pytest.raises(ValueError, match=r"layer 1: window must be >= 1"):
        LayerPlan([{"encoding": "rope"}, {"encoding": "rope", "window": 0}])
    with pytest.raises(ValueError, match=r"layer 0: encoding 'learned' is additive"):
        LayerPlan([{"encoding": "learned"}])
    with pytest.raises(TypeError, match=r"layer 1: must be a LayerSpec or a dict, got str"):
        LayerPlan([LayerSpec("rope"), "rope"])
    with pytest.raises(TypeError, match=r"layer 0: unknown field\(s\) \['encodng'\]; accepted"):
        LayerPlan([{"encodng": "rope"}])
    with pytest.raises(ValueError, match="at least one layer"):
        LayerPlan([])
    with pytest.raises(TypeError, match="sequence of LayerSpec"):
        LayerPlan("rope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"input must be an additive encoding, got 'rope'"):
        LayerPlan([LayerSpec()], input="rope")
    assert LayerPlan([{"encoding": "rope", "window": 8}])[0] == LayerSpec("rope", window=8)


def _kinds(plan):
    """Per layer: (encoding, pattern) in short."""
    return [(str(spec.encoding), spec.pattern.describe()) for spec in plan]


def test_uniform_puts_an_additive_encoding_at_the_input():
    plan = LayerPlan.uniform(3, "learned", window=5)
    assert plan.input == "learned" and _kinds(plan) == [("None", "window 5")] * 3
    plan = LayerPlan.uniform(2, "alibi", softcap=50.0)
    assert plan.input is None and [s.softcap for s in plan] == [50.0, 50.0]


def test_nope_every_drops_the_encoding_of_every_nth_layer():
    plan = LayerPlan.nope_every(8, 4, "rope", chunk=8192, temperature=True)
    nope = [i for i, spec in enumerate(plan) if spec.encoding is None]
    assert nope == [3, 7]
    assert all(plan[i].pattern == FULL and plan[i].query_temperature for i in nope)
    assert all(plan[i].pattern.chunk == 8192 and plan[i].temperature is None
               for i in range(8) if i not in nope)  # fmt: skip
    assert [s.encoding is None for s in LayerPlan.nope_every(6, 2)] == [False, True] * 3


def test_local_global_and_alternate_repeat_their_pattern():
    plan = LayerPlan.local_global(12, 6, window=1024, local="rope", global_="nope")
    assert [s.pattern.window for s in plan] == ([1024] * 5 + [None]) * 2
    assert [s.encoding for s in plan] == (["rope"] * 5 + ["nope"]) * 2
    plan = LayerPlan.local_global(7, (2, 3), window=8, softcap=30.0, sinks=True)
    assert [s.pattern.describe() for s in plan][:5] == ["window 8"] * 2 + ["full"] * 3
    assert all(s.softcap == 30.0 and s.sinks for s in plan)
    plan = LayerPlan.alternate(5, sinks=True)
    assert [s.pattern.window for s in plan] == [128, None, 128, None, 128]
    for bad, exc in (((3, 0), ValueError), (1, ValueError), ("3:1", TypeError)):
        with pytest.raises(exc, match="ratio"):
            LayerPlan.local_global(4, bad, window=8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda bad: LayerPlan([LayerSpec()], input=bad), "input"),
        (lambda bad: LayerPlan.local_global(4, window=8, local=bad), "local"),
        (lambda bad: LayerPlan.local_global(4, window=8, global_=bad), "global_"),
    ],
)
def test_plan_encodings_are_named_when_unknown(build, name):
    """An unknown or mistyped encoding names the argument it came by (the error spoke of
    'an encoding' alone)."""
    with pytest.raises(ValueError, match=f"^{name}: unknown encoding"):
        build("no-such")
    with pytest.raises(TypeError, match=f"^{name}: an encoding must be"):
        build(1)


def test_constructors_follow_the_layer_conventions_of_transformers():
    """Which layer is NoPE, local or global, as transformers' configs lay them out by
    default (Llama 4 and SmolLM3 ``no_rope_layers``: 1 = RoPE; ``layer_types``)."""
    transformers = pytest.importorskip("transformers")
    n = 12
    for config in (
        transformers.Llama4TextConfig(num_hidden_layers=n),
        transformers.SmolLM3Config(num_hidden_layers=n),
    ):
        rope = [spec.encoding is not None for spec in LayerPlan.nope_every(n, 4)]
        assert rope == [bool(r) for r in config.no_rope_layers[:n]]
    for config, plan in (
        (transformers.Gemma3TextConfig, LayerPlan.local_global(n, 6, window=1)),
        (transformers.Gemma2Config, LayerPlan.local_global(n, (1, 1), window=1)),
        (transformers.Cohere2Config, LayerPlan.local_global(n, 4, window=1)),
        (transformers.GptOssConfig, LayerPlan.alternate(n)),
    ):
        config = config(num_hidden_layers=n)
        local = ["sliding_attention" if s.pattern.local else "full_attention" for s in plan]
        assert local == list(config.layer_types), type(config).__name__


def test_a_plan_prints_as_a_table():
    plan = LayerPlan(
        [
            LayerSpec({"name": "rope", "base": 1e6, "layout": "half"}, chunk=8192),
            LayerSpec("alibi", window=128, sinks=True, softcap=50.0),
            LayerSpec(posenc.create("rope", head_dim=8, base=500.0)),
            LayerSpec(None, temperature=True),
        ],
        input={"name": "learned", "max_positions": 64},
    )
    assert plan.lines(width=100) == [
        "layer  encoding                  pattern     sinks  softcap  temperature",
        "-----  ------------------------  ----------  -----  -------  ---------------------",
        "input  learned max_positions=64  -           -      -        -",
        "0      rope base=1e+06           chunk 8192  no     -        -",
        "1      alibi                     window 128  yes    50       -",
        "2      rope base=500             full        no     -        -",
        "3      nope                      full        no     -        floor 8192, scale 0.1",
    ]
    # 87 columns: in 80 each encoding longer than its name is a label, spelled out below
    assert str(plan) == "\n".join(
        [
            "layer  encoding     pattern     sinks  softcap  temperature",
            "-----  -----------  ----------  -----  -------  ---------------------",
            "input  learned [1]  -           -      -        -",
            "0      rope [2]     chunk 8192  no     -        -",
            "1      alibi        window 128  yes    50       -",
            "2      rope [3]     full        no     -        -",
            "3      nope         full        no     -        floor 8192, scale 0.1",
            "[1] learned max_positions=64",
            "[2] rope base=1e+06",
            "[3] rope base=500",
        ]
    )
    assert repr(plan) == f"LayerPlan of 4 layers:\n{plan}"
    with pytest.raises(ValueError, match="width"):
        plan.lines(width=0)


def test_a_hugging_face_plan_prints_in_80_columns():
    """``layer_plan(config)`` of Llama 3.1: every layer's RoPE with its llama3 scaling, a
    row of 150 columns, and a repr of 1,458 on one line; both fit 80 columns, the scaling
    spelled out once, wrapped."""
    pytest.importorskip("transformers")
    from posenc.hf import layer_plan

    config = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
              "num_hidden_layers": 3, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}}  # fmt: skip
    plan = layer_plan(config)
    assert repr(plan).splitlines() == [
        "LayerPlan of 3 layers:",
        "layer  encoding  pattern  sinks  softcap  temperature",
        "-----  --------  -------  -----  -------  -----------",
        "0      rope [1]  full     no     -        -",
        "1      rope [1]  full     no     -        -",
        "2      rope [1]  full     no     -        -",
        "[1] rope base=500000 scaling=llama3(factor=8, low_freq_factor=1,",
        "    high_freq_factor=4, original_max_position_embeddings=8192)",
    ]


# -- the model: forward against the layers written out -------------------------------------


def reference_logits(model, plan, ids, causal=True):
    """The logits of ``model`` on ``ids`` computed here, layer by layer, from its weights:
    fresh encodings built from the plan, the mask of each layer's window or chunk by
    position, the temperature, the softcap and the sinks written out densely."""
    b, s = ids.shape
    hd, h, kv = model.head_dim, model.n_heads, model.n_kv_heads
    pos = torch.arange(s)
    i, j = pos[:, None], pos[None, :]
    x = model.embed(ids) * math.sqrt(model.dim)
    if plan.input is not None:
        x = posenc.build(plan.input, dim=model.dim)(x)
    for block, spec in zip(model.blocks, plan, strict=True):
        attn = block.attn
        enc = posenc.build(spec.encoding or "nope", head_dim=hd, n_heads=h)
        q, k, v = (block.attn_norm(x) @ attn.qkv.weight.T).split([h * hd, kv * hd, kv * hd], -1)
        q, k, v = (t.view(b, s, -1, hd).transpose(1, 2) for t in (q, k, v))  # [b, heads, s, hd]
        if enc.kind == "rotary":
            q, k = enc(q, k)
        if spec.query_temperature is not None:  # log(floor((p + 1) / f) + 1) * a + 1
            t = spec.query_temperature
            q = (
                q
                * (torch.log(torch.floor((pos + 1) / t.floor_scale) + 1) * t.attn_scale + 1)[
                    :, None
                ]
            )
        k, v = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))
        scale = 1 / math.sqrt(hd) if model.scale is None else model.scale
        scores = q @ k.transpose(-1, -2) * scale  # [b, h, s, s]
        if enc.kind == "bias":
            scores = scores + enc.bias(pos, pos)
        if spec.softcap is not None:
            scores = spec.softcap * torch.tanh(scores / spec.softcap)
        seen = j <= i if causal else torch.ones(s, s, dtype=torch.bool)
        if spec.window is not None:
            seen &= (j > i - spec.window) if causal else ((i - j).abs() <= spec.window // 2)
        if spec.chunk is not None:
            seen &= i // spec.chunk == j // spec.chunk
        scores = scores.masked_fill(~seen, float("-inf"))
        if attn.sinks is not None:
            sink = attn.sinks.view(1, h, 1, 1).expand(b, h, s, 1)
            probs = torch.cat((scores, sink), -1).softmax(-1)[..., :-1]
        else:
            probs = scores.softmax(-1)
        out = (probs @ v).transpose(1, 2).reshape(b, s, h * hd)
        x = x + out @ attn.out.weight.T
        x = x + block.mlp(block.mlp_norm(x))
    head = model.embed.weight if model.head is None else model.head.weight
    return F.linear(model.norm(x), head)


@pytest.mark.parametrize("name", list(PLANS))
def test_plan_model_equals_its_layers_written_out(name, model_tol):
    model, ids = plan_model(PLANS[name]), torch.randint(0, VOCAB, (2, SEQ))
    with torch.no_grad():
        got, want = model(ids), reference_logits(model, PLANS[name], ids)
        torch.testing.assert_close(got, want, **model_tol(model, SEQ, want))
        # the pattern matters: the same weights with every layer full differ
        full = [LayerSpec(spec.encoding) for spec in PLANS[name]]
        plain = reference_logits(model, LayerPlan(full, input=PLANS[name].input), ids)
        assert (plain - want).abs().max() > 1e-2


def test_a_score_scale_is_every_layer_s(model_tol):
    """Gemma's query_pre_attn_scalar ** -0.5 in place of head_dim ** -0.5: the model with
    ``scale=`` equals its layers written out with that scale, and differs from the default."""
    plan = LayerPlan([LayerSpec("rope", window=4, softcap=3.0), LayerSpec("alibi", sinks=True)])
    model, ids = plan_model(plan, scale=0.05), torch.randint(0, VOCAB, (2, SEQ))
    assert model.blocks[0].attn.scale == 0.05 and "scale 0.05" in repr(model.blocks[1].attn)
    with torch.no_grad():
        want = reference_logits(model, plan, ids)
        torch.testing.assert_close(model(ids), want, **model_tol(model, SEQ, want))
        model.scale = None  # the reference with the default scale, the same weights
        assert (reference_logits(model, plan, ids) - want).abs().max() > 1e-2
        # the maps read the scale: they equal the default-scale model's whose queries are
        # multiplied by scale * sqrt(head_dim) (RoPE is linear in q; bias and cap come after)
        default = copy.deepcopy(model)
        model.scale = 0.05
        for block in default.blocks:
            block.attn.scale = None
            block.attn.qkv.weight[: HEADS * model.head_dim] *= 0.05 * math.sqrt(model.head_dim)
        torch.testing.assert_close(
            attention_maps(model, ids), attention_maps(default, ids), atol=1e-5, rtol=1e-5
        )
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        plan_model(plan, scale=0.0)


def test_bidirectional_plan_model_equals_its_layers_written_out(model_tol):
    plan = LayerPlan([LayerSpec("rope", window=4), LayerSpec("alibi", chunk=5, softcap=2.0)])
    model, ids = plan_model(plan, causal=False), torch.randint(0, VOCAB, (2, SEQ))
    with torch.no_grad():
        want = reference_logits(model, plan, ids, causal=False)
        torch.testing.assert_close(model(ids), want, **model_tol(model, SEQ, want))


def test_encoding_is_the_plan_with_one_encoding_everywhere():
    torch.manual_seed(1)
    plain = TransformerLM(VOCAB, DIM, 2, HEADS, "t5")
    torch.manual_seed(1)
    planned = TransformerLM(VOCAB, DIM, 2, HEADS, plan=LayerPlan.uniform(2, "t5"))
    assert plain.plan == planned.plan == LayerPlan([LayerSpec("t5")] * 2)
    # the keys arena checkpoints hold: the encoding's under "encoding.", the untied head last
    assert list(plain.state_dict()) == list(planned.state_dict()) == [
        "encoding.weight",
        "embed.weight",
        *(f"blocks.{i}.{key}" for i in range(2) for key in (
            "attn_norm.weight", "attn.qkv.weight", "attn.out.weight", "mlp_norm.weight",
            "mlp.0.weight", "mlp.2.weight")),
        "norm.weight",
        "head.weight",
    ]  # fmt: skip
    ids = torch.randint(0, VOCAB, (2, 7))
    torch.testing.assert_close(plain(ids), planned(ids), rtol=0, atol=0)
    additive = TransformerLM(VOCAB, DIM, 2, HEADS, {"name": "learned", "max_positions": 16})
    assert additive.encoding.kind == "additive" and additive.plan.input is not None
    assert [k for k in additive.state_dict() if "encoding" in k] == ["encoding.weight"]


def test_a_mixed_plan_shares_equal_specs_and_names_its_encodings():
    enc = posenc.create("t5", n_heads=HEADS)
    plan = [
        LayerSpec(None),
        LayerSpec("rope", window=4),
        LayerSpec({"name": "rope", "base": 10_000.0}, sinks=True),  # built equal: shared
        LayerSpec(enc),
        LayerSpec(enc, window=2),
        LayerSpec("t5"),  # not the instance: its own
    ]
    model = TransformerLM(VOCAB, DIM, 6, HEADS, plan=LayerPlan(plan, input="sinusoidal"))
    names = [e.info.name for e in model.encodings]
    assert names == ["sinusoidal", "nope", "rope", "t5", "t5"]
    assert model.encoding.info.name == "sinusoidal" and model.encodings[3] is enc
    assert model._layer_encoding == (1, 2, 2, 3, 3, 4)
    keys = [k for k in model.state_dict() if "encoding" in k or "sinks" in k]
    assert keys == ["extra_encodings.2.weight", "extra_encodings.3.weight", "blocks.2.attn.sinks"]
    # without an input encoding, the first layer's that is not NoPE
    model = TransformerLM(VOCAB, DIM, 3, HEADS, plan=LayerPlan.nope_every(3, 1 + 1, "alibi"))
    assert model.encoding.info.name == "alibi"
    assert [e.info.name for e in model.encodings] == ["alibi", "nope"]


def test_one_rotation_per_distinct_encoding_per_forward(monkeypatch):
    from posenc.rotary.rope import RoPE

    calls = []
    for method in ("rotation", "_layer_rotation"):  # given positions, default ones
        real = getattr(RoPE, method)
        counted = lambda self, *a, _real=real, **kw: calls.append(self) or _real(self, *a, **kw)  # noqa: E731
        monkeypatch.setattr(RoPE, method, counted)
    plan = [
        LayerSpec("rope", window=3),
        LayerSpec("rope"),
        LayerSpec({"name": "rope", "base": 500.0}),
        LayerSpec({"name": "rope", "base": 500.0}, chunk=4),
        LayerSpec(None),
    ]
    model = TransformerLM(VOCAB, DIM, 5, HEADS, plan=plan)
    ids = torch.randint(0, VOCAB, (2, 9))
    for positions in (None, torch.arange(9) * 2):
        calls.clear()
        model(ids, positions)
        assert len(calls) == 2 and calls == list(model.encodings[:2])


def test_one_bias_table_per_encoding_pattern_softcap_and_sinks(monkeypatch):
    asked = []
    real = shared_module.shared_bias

    def counted(encoding, *args, traits, **kwargs):
        asked.append((encoding.info.name, traits.pattern, traits.softcap, traits.sinks))
        return real(encoding, *args, traits=traits, **kwargs)

    monkeypatch.setattr(shared_module, "shared_bias", counted)
    plan = [
        LayerSpec("t5"),
        LayerSpec("t5"),
        LayerSpec("t5", window=3),
        LayerSpec("t5", softcap=5.0),
        LayerSpec("t5", sinks=True),
        LayerSpec("t5", window=3),
        LayerSpec("alibi"),
        LayerSpec("rope"),
    ]
    model = TransformerLM(VOCAB, DIM, 8, HEADS, plan=plan)
    ids = torch.randint(0, VOCAB, (2, 9))
    model(ids).sum().backward()
    assert asked == [
        ("t5", FULL, None, False),
        ("t5", AttnPattern(window=3), None, False),
        ("t5", FULL, 5.0, False),
        ("t5", FULL, None, True),
        ("alibi", FULL, None, False),
    ]
    assert model.encoding.weight.grad.abs().sum() > 0


def test_training_a_plan_model_lowers_the_loss():
    plan = [
        LayerSpec("rope", chunk=4, sinks=True),
        LayerSpec("t5", window=3, softcap=5.0),
        LayerSpec("alibi", sinks=True),
        LayerSpec(None, temperature=WARM),
    ]
    model = TransformerLM(VOCAB, DIM, 4, HEADS, n_kv_heads=KV_HEADS, plan=plan)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, VOCAB, (4, 16))
    losses = []
    for _ in range(25):
        opt.zero_grad()
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    for i in (0, 2):
        assert model.blocks[i].attn.sinks.grad.abs().sum() > 0
    assert model.encodings[1].info.name == "t5" and model.encodings[1].weight.grad is not None


@pytest.mark.parametrize("name", ["llama4", "gpt-oss"])
def test_generate_with_cache_equals_recomputation(name, check_cached_decoding):
    """Windows and chunks act by position, so the full KV cache gives what recomputing
    the whole sequence gives, past the window."""
    model = plan_model(PLANS[name])
    check_cached_decoding(model, torch.randint(0, VOCAB, (2, 5)), 10)


def test_attention_maps_are_the_probabilities_the_plan_uses():
    """maps @ v through the output projection rebuild each layer's output; with sinks the
    rows sum to less than 1, elsewhere to 1; keys outside the window or chunk get 0."""
    plan = [
        LayerSpec("alibi", window=3, sinks=True, softcap=2.0),
        LayerSpec("rope", chunk=4),
        LayerSpec(None, temperature=WARM),
    ]
    model = plan_model(LayerPlan(plan)).double()
    ids = torch.randint(0, VOCAB, (2, SEQ))
    seen = []

    def hook(module, args, kwargs, output):
        seen.append((module, args[0], kwargs, output))

    handles = [b.attn.register_forward_hook(hook, with_kwargs=True) for b in model.blocks]
    with torch.no_grad():
        model(ids)
    for handle in handles:
        handle.remove()
    maps = attention_maps(model, ids)
    assert maps.shape == (3, 2, HEADS, SEQ, SEQ)
    sums = maps.sum(-1)
    assert (sums[0] < 1 - 1e-3).all()
    torch.testing.assert_close(sums[1:], torch.ones_like(sums[1:]))
    i, j = torch.arange(SEQ)[:, None], torch.arange(SEQ)[None, :]
    assert (maps[0][..., j <= i - 3] == 0).all() and (maps[1][..., i // 4 != j // 4] == 0).all()
    for layer, (attn, x, kwargs, out) in enumerate(seen):
        with torch.no_grad():
            _, _, v = attn.project(x, kwargs["encoding"], kwargs["rotation"])
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1).float()
            rebuilt = (maps[layer] @ v).transpose(1, 2).flatten(2) @ attn.out.weight.T.float()
        torch.testing.assert_close(rebuilt, out.float(), atol=1e-5, rtol=1e-5)


# -- errors ---------------------------------------------------------------------------------


def test_the_model_refuses_a_bad_plan():
    def lm(*args, **kwargs):
        return TransformerLM(VOCAB, DIM, 2, HEADS, *args, **kwargs)

    with pytest.raises(TypeError, match="not both"):
        lm("rope", plan=LayerPlan.uniform(2, "rope"))
    with pytest.raises(TypeError, match=r"pass encoding= .* or plan="):
        lm()
    with pytest.raises(ValueError, match="plan has 3 layers but n_layers is 2"):
        lm(plan=LayerPlan.uniform(3, "rope"))
    with pytest.raises(TypeError, match="layer 1: must be a LayerSpec"):
        lm(plan=[LayerSpec("rope"), "alibi"])
    with pytest.raises(ValueError, match=r"layer 1: encoding 'rope head_dim=4': .*head_dim=8"):
        lm(plan=[LayerSpec("rope"), LayerSpec({"name": "rope", "head_dim": 4})])
    with pytest.raises(ValueError, match=r"layer 0: encoding 'rope_2d' takes image-grid"):
        lm(plan=[LayerSpec({"name": "rope_2d", "grid": (2, 3)}), LayerSpec("rope")])
    with pytest.raises(ValueError, match=r"input: encoding 'learned max_positions=0'"):
        lm(plan=LayerPlan([LayerSpec()] * 2, input={"name": "learned", "max_positions": 0}))


def test_positions_are_checked_by_every_encoding_of_the_plan():
    plan = LayerPlan([LayerSpec("mrope"), LayerSpec(None)])
    model = TransformerLM(VOCAB, DIM, 2, HEADS, plan=plan)
    ids = torch.randint(0, VOCAB, (1, 4))
    text = torch.arange(4)
    model(ids, positions=text)
    with pytest.raises(ValueError, match="positions must be"):  # NoPE takes no M-RoPE ids
        model(ids, positions=text.expand(3, 1, 4))
    plan = LayerPlan([LayerSpec("rope")], input={"name": "learned", "max_positions": 6})
    model = TransformerLM(VOCAB, DIM, 1, HEADS, plan=plan)
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions"):
        model.generate(ids, 1, positions=torch.arange(3, 7))
    assert model.check_positions(torch.arange(4, dtype=torch.int16)).dtype == torch.int64


def test_a_padded_prompt_generates_what_it_generates_alone():
    """Windows, chunks and the temperature read the positions of the padded batch (counted
    over real tokens), so a left-padded prompt continues as it does unpadded."""
    model = plan_model(PLANS["llama4"])
    prompts = torch.randint(0, VOCAB, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0  # the second prompt is 4 tokens, left-padded
    batch = model.generate(prompts, 9, attention_mask=mask)
    alone = model.generate(prompts[1:, 3:], 9)
    assert torch.equal(batch[1:, 3:], alone)


@pytest.mark.parametrize("name", ["llama4", "cohere2", "gemma", "gpt-oss", "input"])
def test_a_rolling_cache_decodes_as_the_full_cache_and_holds_only_its_window(name):
    """Window and chunk layers keep their last ``W - 1`` (``C - 1``) keys; prefill then
    single steps, past the window, give the logits of the cache that keeps everything,
    padded prompts included, and the rolling layers hold no more than that."""
    torch.manual_seed(0)
    model = plan_model(PLANS[name])
    ids = torch.randint(0, VOCAB, (2, 15))
    mask = torch.ones(2, 15, dtype=torch.long)
    mask[1, :2] = 0  # a left-padded row
    logits = {}
    for rolling in (True, False):
        cache = model.new_cache(2, 15, rolling=rolling)
        steps = [model(ids[:, :6], cache=cache, attention_mask=mask[:, :6])]
        for t in range(6, 15):
            steps.append(model(ids[:, t : t + 1], cache=cache, attention_mask=mask[:, : t + 1]))
        logits[rolling] = torch.cat(steps, dim=1)
        memory = cache.memory()
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-5, atol=1e-5)
    rolled = model.new_cache(2, 15)
    per_token = 2 * 2 * KV_HEADS * (DIM // HEADS) * 4  # k and v, batch 2, float32
    for i, spec in enumerate(model.plan):
        local = spec.pattern.window or spec.pattern.chunk
        assert rolled.memory()[i] == per_token * (15 if local is None else local - 1)
        assert memory[i] == per_token * 15  # rolling=False: every layer keeps every key
