"""TransformerLM under torch.compile: one graph per forward for every encoding of token
sequences and for a plan with windows, chunks, sinks and a softcap; a decode step over a
StaticKVCache compiled once; a compiled training step equal to eager.

Compiling is slow on a CPU: one case of each kind runs in the default suite, the rest
under ``make test-slow``."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.utils import counters
from torch.testing import assert_close

import posenc
from posenc.models import LayerPlan, LayerSpec, TransformerLM

NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
FAST = {"rope", "alibi", "fire"}  # rotary, linear bias, the data-dependent MLP
VOCAB = 64
PLAN = LayerPlan(
    [
        LayerSpec("rope", window=5, sinks=True),
        LayerSpec("alibi", chunk=8, softcap=30.0),
        LayerSpec("t5", window=7),
        LayerSpec(None, sinks=True),
    ]
)


def lm(name=None, plan=None) -> TransformerLM:
    torch.manual_seed(0)
    if plan is not None:
        return TransformerLM(VOCAB, 32, len(plan), 2, plan=plan)
    return TransformerLM(VOCAB, 32, 2, 2, encoding=name)


def graphs(fn, *args) -> tuple[int, list[str]]:
    dynamo.reset()
    explained = dynamo.explain(fn)(*args)
    return explained.graph_count, [str(b.reason) for b in explained.break_reasons]


def marked(names, fast):
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", marked(NAMES, FAST))
def test_a_forward_is_one_graph(name):
    """With and without a padding mask (FIRE broke the graph 9 times, ALiBi 8)."""
    model = lm(name)
    ids = torch.randint(0, VOCAB, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[0, :5] = 0
    assert graphs(model, ids) == (1, [])
    assert graphs(lambda i, m: model(i, attention_mask=m), ids, mask) == (1, [])


@pytest.mark.slow
def test_a_plan_is_one_graph():
    model = lm(plan=PLAN)
    ids = torch.randint(0, VOCAB, (2, 24))
    assert graphs(model, ids) == (1, [])


@pytest.mark.parametrize("name", marked(["rope", "alibi", "fox", "fire", "plan"], {"rope"}))
def test_a_static_decode_step_compiles_once(name, model_tol):
    """The prompt and the one-token step: two graphs over 6 steps (31 with the growing
    cache), the logits of the eager forward; with a plan, its window and chunk layers keep
    rings."""
    model = (lm(plan=PLAN) if name == "plan" else lm(name)).eval()
    ids = torch.randint(0, VOCAB, (2, 14))
    dynamo.reset()
    counters.clear()
    step = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2, 16, static=True)
        outs = [step(ids[:, :8], cache=cache)]
        outs += [step(ids[:, i : i + 1], cache=cache) for i in range(8, 14)]
    assert counters["stats"]["unique_graphs"] == 2
    assert_close(torch.cat(outs, 1), full, **model_tol(model, 14, full))


def test_compiled_generate_gives_the_eager_tokens():
    model = lm("rope").eval()
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0
    dynamo.reset()
    counters.clear()
    compiled = model.generate(ids, 8, attention_mask=mask, compile=True)
    assert counters["stats"]["unique_graphs"] == 2
    assert torch.equal(compiled, model.generate(ids, 8, attention_mask=mask))
    with pytest.raises(ValueError, match="needs use_cache=True"):
        model.generate(ids, 2, use_cache=False, compile=True)


@pytest.mark.parametrize("name", marked(["rope", "alibi", "nope"], {"rope"}))
def test_a_compiled_training_step_equals_eager(name, tol):
    eager, compiled = lm(name), lm(name)
    ids = torch.randint(0, VOCAB, (2, 16))
    step = torch.compile(compiled, fullgraph=True)
    dynamo.reset()
    for forward in (eager, step):
        loss = torch.nn.functional.cross_entropy(forward(ids).flatten(0, 1), ids.flatten())
        loss.backward()
    for (name_, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        # a gradient sums over the tokens and the layers' reductions: float32 rounding
        # counted over 2·16 tokens × a few hundred terms
        assert_close(b.grad, a.grad, **tol(torch.float32, n=32 * 512, scale=1.0)), name_


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["auto", "sdpa", "math"])
def test_attention_compiles_with_a_bias_encoding(backend, tol):
    alibi = posenc.create("alibi", n_heads=2)
    q, k, v = torch.randn(3, 1, 2, 16, 8).unbind(0)
    run = torch.compile(posenc.attention, fullgraph=True)
    dynamo.reset()
    out = run(q, k, v, alibi, backend=backend)
    expected = posenc.attention(q, k, v, alibi, backend="math")
    # 16 keys × 8 channels summed, in another order than the float32 math backend's
    assert_close(out, expected, **tol(torch.float32, n=16 * 8 * 4, scale=v.abs().max().item()))


def written_inputs(step, *args, **kwargs) -> tuple[int, list[torch.Tensor]]:
    """The graphs ``torch.compile(step, fullgraph=True)`` makes for one call, and every
    input tensor their run writes in place (its version counter moves)."""
    graphs, written = [], []

    def backend(gm, example_inputs):
        graphs.append(gm)

        def run(*inputs):
            before = [t._version if isinstance(t, torch.Tensor) else None for t in inputs]
            out = gm(*inputs)
            written.extend(
                t for t, v in zip(inputs, before, strict=True) if v is not None and t._version != v
            )
            return out

        return run

    dynamo.reset()
    with torch.no_grad():
        torch.compile(step, backend=backend, fullgraph=True)(*args, **kwargs)
    return len(graphs), written


@pytest.mark.parametrize("name", ["rope", "fox", "plan"])
def test_a_decode_step_writes_only_the_static_caches_tensors(name):
    """What a CUDA graph needs to replay a step (inductor skips a graph that writes any
    other input): one graph, and every tensor it writes in place is one of the cache's,
    marked as a static address (FoX's clocks and a plan's rings too)."""
    model = (lm(plan=PLAN) if name == "plan" else lm(name)).eval()
    ids = torch.randint(0, VOCAB, (2, 9))
    cache = model.new_cache(2, 16, static=True)
    with torch.no_grad():
        model(ids[:, :8], cache=cache)
    count, written = written_inputs(model, ids[:, 8:], cache=cache)
    held = {id(t) for t in cache.tensors()}
    assert count == 1 and written
    assert all(id(t) in held for t in written)
    assert all(getattr(t, "_dynamo_static_input_type", None) for t in cache.tensors())
    assert int(cache.filled) == 9


def test_generate_with_cuda_graphs_compiles_once_and_gives_the_eager_tokens():
    """compile="reduce-overhead" (CUDA graphs on a GPU; on the CPU torch compiles it as
    the default mode): the prompt and the step, two graphs for the whole decode, no graph
    break in the step, and the eager tokens, padded prompts too."""
    model = lm("rope").eval()
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0
    dynamo.reset()
    counters.clear()
    tokens = model.generate(ids, 6, attention_mask=mask, compile="reduce-overhead")
    assert counters["stats"]["unique_graphs"] == 2
    assert torch.equal(tokens, model.generate(ids, 6, attention_mask=mask))
    cache = model.new_cache(2, 12, static=True)
    with torch.no_grad():
        model(ids, cache=cache)
        step = lambda token: model(token, cache=cache)  # noqa: E731
        assert graphs(step, tokens[:, 6:7]) == (1, [])


@pytest.mark.parametrize(
    ("compile", "error", "match"),
    [
        ("fast", ValueError, r"compile must be True, False or one of \['default'"),
        (1, TypeError, "compile must be a bool or a torch.compile mode"),
        (None, TypeError, "compile must be a bool"),
    ],
)
def test_generate_names_a_bad_compile_mode(compile, error, match):
    model = lm("rope").eval()
    with pytest.raises(error, match=match):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 1, compile=compile)
    with pytest.raises(ValueError, match="'reduce-overhead' decodes over a static KV cache"):
        model.generate(
            torch.zeros(1, 2, dtype=torch.long), 1, use_cache=False, compile="reduce-overhead"
        )
