"""TransformerLM through ``torch.export`` and ONNX Runtime (issue 40, item 4).

Every encoding of token sequences that a :class:`~posenc.models.TransformerLM` takes
(``position_axes == 1``, as tests/models/test_packing.py enumerates them) is exported with
its sequence length declared dynamic (:class:`torch.export.Dim`), and the exported program
must give eager's logits at two lengths, the example's and another; so must a layer plan
with windows, chunks, sinks and a softcap. A rope, an alibi, a t5 and a nope model go
through ``torch.onnx.export(..., dynamo=True)`` and run in ONNX Runtime (CPU) at two lengths
from that one export. A tiny Hugging Face Llama extended by
:func:`posenc.hf.extend_context` exports too.

RoPE's length-dependent scalings (dynamic NTK, LongRoPE) export with a dynamic length and
give eager's frequencies and logits past the original length, in torch.export and in ONNX
Runtime (issue 55, item 1: the ONNX export used to run them with the frequencies of the
example's length, silently).

Where posenc cannot export today (CoPE's and FoX's row blocks) the test is a strict
``xfail`` naming the cause (file:line and the operation), so it fails, and asks for the
mark to go, the moment the cause is fixed. Fixed-length exports stay checked
too (``test_export_at_a_fixed_length_equals_eager``). Exports take seconds each: one of each
kind runs in ``make test``, the rest are ``slow`` (``make test-slow``).
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from torch.testing import assert_close

import posenc
from posenc.hf import extend_context, rope_from_hf_config
from posenc.models import DecodeStep, LayerPlan, LayerSpec, TransformerLM
from posenc.rotary.scaling import SCALING_CONFIGS

VOCAB, DIM, LAYERS, HEADS, BATCH = 37, 32, 2, 4, 2
#: the example the export traces with, and a length it never saw
EXAMPLE, OTHER = 12, 20
SEQUENCE_NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
#: one encoding's export in the default suite; the others are slow
DEFAULT = "rope"

# Why a dynamic sequence length does not export, each cause as the first export that meets
# it reports it; an encoding lists its causes in the order an export meets them (fixing
# the first shows the next: each was found by patching the ones before it in a copy).
COPE_ROW_BLOCKS = (
    "attn/runners/scores.py:116 `for i0 in range(0, q_len, block)` (row_blocks) loops over "
    "row blocks in Python: guard Eq(seq, 12), the length specialized to the example's"
)
DCA_CHUNKS = (
    "attn/dual_chunk.py:86 `for c0 in range(start - start % s, k_len, s)` loops over the "
    "chunks of queries in Python (one SDPA call each): the length specialized to the example's"
)
FOX_QUERY_BLOCKS = (
    "attn/forget.py:59 `n = min(8 - d % 8, q_len)` then one_hot(block, n) at :67: guard "
    "min(8, seq) == 8, so the export holds for seq >= 8 only (it does with Dim(min=8))"
)

STICK_ROW_BLOCKS = (
    "attn/runners/weights.py loops over row blocks in Python (row_blocks), each stopping "
    "at its last query's key: the length specialized to the example's"
)
PATH_BLOCKS = (
    "attn/runners/path.py loops over row blocks in Python (row_blocks), and "
    "functional/path.py over blocks of 64 keys (path_scores): the length specialized to "
    "the example's"
)


def dynamic_causes(name: str) -> list[str]:
    """The causes a dynamic-length export of a uniform ``name`` model meets, in order."""
    causes = []
    if name == "cope":
        causes.append(COPE_ROW_BLOCKS)
    if name == "dca":
        causes.append(DCA_CHUNKS)
    if name == "fox":
        causes.append(FOX_QUERY_BLOCKS)
    if name == "path":
        causes.append(PATH_BLOCKS)
    if name == "stick_breaking":
        causes.append(STICK_ROW_BLOCKS)
    return causes


def refused(causes: list[str]) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason="; then ".join(causes))


def case(name: str, causes: list[str]):
    """``name`` as a parameter: slow unless it is :data:`DEFAULT`, a strict xfail naming
    ``causes`` if any."""
    marks = [] if name == DEFAULT else [pytest.mark.slow]
    if causes:
        marks.append(refused(causes))
    return pytest.param(name, marks=marks, id=name)


def seq_dim() -> Dim:
    return Dim("seq", min=2, max=64)


def model(name=None, sharpen=None, plan: LayerPlan | None = None) -> TransformerLM:
    """A small model of ``name`` (or of ``plan``), encoding parameters and sinks moved off
    their (often zero) initial values and attention sharpened, so that positions show in
    the logits (as test_packing's)."""
    torch.manual_seed(0)
    n_layers = LAYERS if plan is None else len(plan)
    shape = {"vocab_size": VOCAB, "dim": DIM, "n_layers": n_layers, "n_heads": HEADS}
    lm = TransformerLM(**shape, encoding=name, plan=plan)
    with torch.no_grad():
        for pname, p in lm.named_parameters():
            if pname.startswith(("encoding.", "extra_encodings.")) or "sink" in pname:
                p.add_(torch.randn_like(p) * 0.3)
    return (sharpen(lm) if sharpen else lm).eval()


def tokens(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, length))


def check_exported(program, lm: TransformerLM, lengths, model_tol) -> None:
    """The exported program's logits equal eager's at every length: rounding only, as
    ``model_tol`` counts it (the same float32 math, its decompositions may sum in another
    order; a wrong position or a stale length-dependent table is far outside)."""
    for length in lengths:
        ids = tokens(length)
        with torch.no_grad():
            expected = lm(ids)
            got = program.module()(ids)
        assert_close(got, expected, **model_tol(lm, length, expected), msg=f"length {length}")


@pytest.mark.parametrize("name", [case(n, dynamic_causes(n)) for n in SEQUENCE_NAMES])
def test_export_with_dynamic_length_equals_eager(name, sharpen, model_tol):
    lm = model(name, sharpen)
    program = torch.export.export(lm, (tokens(EXAMPLE),), dynamic_shapes=({1: seq_dim()},))
    check_exported(program, lm, (EXAMPLE, OTHER), model_tol)


@pytest.mark.parametrize("name", [case(n, []) for n in SEQUENCE_NAMES])
def test_export_at_a_fixed_length_equals_eager(name, sharpen, model_tol):
    """What issue 40 found working (rope, alibi, t5, nope; every encoding since 627ca6c,
    FIRE's host read of its input bound included): keep it so."""
    lm = model(name, sharpen)
    program = torch.export.export(lm, (tokens(EXAMPLE),))
    check_exported(program, lm, (EXAMPLE,), model_tol)


#: every pattern of a layer plan: window, chunk, sinks, softcap, on rotary, bias and none
PLAN = LayerPlan(
    [
        LayerSpec("rope", window=4, softcap=30.0),
        LayerSpec("alibi", chunk=5, sinks=True),
        LayerSpec("t5", window=6, sinks=True, softcap=20.0),
        LayerSpec(None, chunk=8),
    ]
)


@pytest.mark.slow
def test_layer_plan_exports_with_dynamic_length(sharpen, model_tol):
    lm = model(sharpen=sharpen, plan=PLAN)
    program = torch.export.export(lm, (tokens(EXAMPLE),), dynamic_shapes=({1: seq_dim()},))
    check_exported(program, lm, (EXAMPLE, OTHER), model_tol)


@pytest.mark.slow
def test_layer_plan_exports_at_a_fixed_length(sharpen, model_tol):
    lm = model(sharpen=sharpen, plan=PLAN)
    program = torch.export.export(lm, (tokens(EXAMPLE),))
    check_exported(program, lm, (EXAMPLE,), model_tol)


def test_rope_exports_past_the_size_where_its_rotation_changes_path(sharpen, model_tol):
    """RoPE turns q and k in one pass while they are small (``COMPILE_MIN_NUMEL`` elements
    together) and each by the compiled kernel beyond: under a trace the size test came
    first and guarded the length to the small side (q and k here: 2 * 2 * 4 * seq * 8 <
    2**16, seq < 512: torch.export refused ``Dim(max=1024)``). The same math either way:
    exported once, it gives eager's logits on both sides."""
    from posenc.functional.rope_kernel import COMPILE_MIN_NUMEL

    threshold = COMPILE_MIN_NUMEL // (BATCH * 2 * HEADS * (DIM // HEADS))
    lm = model("rope", sharpen)
    length = Dim("seq", min=2, max=2 * threshold)
    program = torch.export.export(lm, (tokens(EXAMPLE),), dynamic_shapes=({1: length},))
    check_exported(program, lm, (EXAMPLE, threshold + 1), model_tol)


#: RoPE's scalings whose frequencies depend on the length, over an original length of 16
#: (this file's models have head_dim 8: four pairs)
ORIGINAL = 16
LENGTH_DEPENDENT = {
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16},
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0, 1.1, 1.5, 2.0],
        "long_factor": [1.0, 2.0, 4.0, 8.0],
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    },
}
#: each one as the example's length sees it: what a program whose length was fixed at the
#: example's computes at every length
AT_EXAMPLE = {
    "dynamic": {"rope_type": "default"},
    "longrope": {**LENGTH_DEPENDENT["longrope"], "long_factor": [1.0, 1.1, 1.5, 2.0]},
}
#: the lengths they run at once exported: the example's (under the original), the original,
#: one past it, and two well past it (the longest the dimension allows)
PAST_ORIGINAL = (EXAMPLE, ORIGINAL, ORIGINAL + 1, 40, 64)


def test_every_length_dependent_scaling_is_exported_here():
    """A new scaling whose frequencies depend on the length joins :data:`LENGTH_DEPENDENT`
    (and so the export tests below)."""
    depends = {name for name, record in SCALING_CONFIGS.items() if record.depends_on_length}
    assert depends == set(LENGTH_DEPENDENT)


class Frequencies(torch.nn.Module):
    """``ids -> rope.inv_freq(ids.shape[1])``: the frequencies at the ids' length."""

    def __init__(self, rope) -> None:
        super().__init__()
        self.rope = rope

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rope.inv_freq(ids.shape[1], ids.device)


@pytest.mark.parametrize("scaling", LENGTH_DEPENDENT)
def test_length_dependent_frequencies_export_exactly(scaling):
    """The exported program computes the frequencies from the length it is given, as eager
    does, to float64 rounding (the same operations in the same order): below, at and past
    the original length, far past it too. Before, the base (dynamic) or the factors
    (longrope) of the example's length were baked in."""
    rope = posenc.create("rope", head_dim=8, scaling=LENGTH_DEPENDENT[scaling])
    length = Dim("seq", min=1, max=1 << 20)
    program = torch.export.export(
        Frequencies(rope), (tokens(EXAMPLE),), dynamic_shapes=({1: length},)
    )
    for n in (1, *PAST_ORIGINAL, 100_000):
        expected = rope.inv_freq(n)
        if n > ORIGINAL:  # the case that was wrong: other frequencies than the example's
            assert not torch.equal(expected, rope.inv_freq(EXAMPLE))
        assert_close(program.module()(tokens(n)), expected, rtol=1e-15, atol=0, msg=f"{n}")


@pytest.mark.parametrize("scaling", LENGTH_DEPENDENT)
def test_length_dependent_rope_exports_with_dynamic_length(scaling, sharpen, model_tol):
    """A model with a length-dependent scaling exports with a dynamic length (torch.export
    refused it before: a guard on the length, which the ONNX exporter's deferred asserts
    dropped) and gives eager's logits past the original length."""
    lm = model({"name": "rope", "scaling": LENGTH_DEPENDENT[scaling]}, sharpen)
    program = torch.export.export(lm, (tokens(EXAMPLE),), dynamic_shapes=({1: seq_dim()},))
    check_exported(program, lm, PAST_ORIGINAL, model_tol)


# --- ONNX Runtime ---

#: the encodings run in ONNX Runtime
ONNX_NAMES = ["rope", "alibi", "t5", "nope"]


def onnx_runtime():
    """The ``onnxruntime`` module, after skipping the test where it or ``onnxscript`` (which
    torch.onnx.export writes the graph with) is not installed: test dependencies, of the
    dev extra only."""
    pytest.importorskip("onnxscript")
    return pytest.importorskip("onnxruntime")


def check_onnx_runtime(lm, path, lengths, model_tol) -> None:
    """ONNX Runtime's CPU provider runs ``path`` at ``lengths`` and gives eager's logits.

    Tolerance: ``model_tol``, float32 rounding counted through every layer's sums (norms,
    projections, scores, softmax, values). ONNX Runtime computes the same float32 graph
    with its own kernels: MLAS's GEMM blocking sums in another order, its exp, tanh and
    erf are vectorised approximations within a few ulp, and the optimizer fuses the
    norms: rounding only, of the size that count already holds; a missing bias or a wrong
    rotation moves the logits by a visible fraction (measured on these models: 1.7e-6 to
    6.1e-6 apart at logits of 3 to 4, the bound about 40 times that).
    """
    ort = onnx_runtime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # two xdist workers share two cores
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    if len(lengths) > 1:
        assert isinstance(given.shape[1], str), f"the length was fixed at export: {given.shape}"
    for length in lengths:
        ids = tokens(length)
        (got,) = session.run(None, {given.name: ids.numpy()})
        with torch.no_grad():
            expected = lm(ids)
        rounding = model_tol(lm, length, expected)
        assert_close(torch.from_numpy(got), expected, **rounding, msg=f"length {length}")


@pytest.mark.parametrize("name", [case(n, []) for n in ONNX_NAMES])
def test_onnx_runtime_equals_eager_at_two_lengths(name, sharpen, model_tol, tmp_path):
    """One ``torch.onnx.export(dynamo=True)`` with a dynamic length, run by ONNX Runtime at
    the example's length and another."""
    onnx_runtime()
    lm = model(name, sharpen)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(
        lm, (tokens(EXAMPLE),), str(path), dynamo=True, dynamic_shapes=({1: seq_dim()},)
    )
    check_onnx_runtime(lm, path, (EXAMPLE, OTHER), model_tol)


@pytest.mark.slow
@pytest.mark.parametrize("name", ONNX_NAMES)
def test_onnx_runtime_equals_eager_at_a_fixed_length(name, sharpen, model_tol, tmp_path):
    """What runs in ONNX Runtime today: one export per length (docs/compile-and-export.md's
    example runs alibi's in the default suite)."""
    onnx_runtime()
    lm = model(name, sharpen)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(lm, (tokens(EXAMPLE),), str(path), dynamo=True)
    check_onnx_runtime(lm, path, (EXAMPLE,), model_tol)


@pytest.mark.parametrize("scaling", LENGTH_DEPENDENT)
def test_onnx_runtime_runs_length_dependent_rope_past_the_original_length(
    scaling, sharpen, model_tol, tmp_path
):
    """Issue 55, item 1: one ``torch.onnx.export(dynamo=True)`` with a dynamic length of a
    dynamic-NTK (and a LongRoPE) model, run by ONNX Runtime past the original length 16,
    gives eager's logits. It gave those of the example's length (dynamic NTK: unscaled
    RoPE's, 0.28 apart at 40 tokens, logits of 3): the ONNX exporter traces with
    ``prefer_deferred_runtime_asserts_over_guards``, so the guard that fixed the base to
    the example's length (or, for LongRoPE, the ``Dim(max=16)`` it refines the shapes to)
    left a program of the example's frequencies that ONNX Runtime runs at any length."""
    onnx_runtime()
    lm = model({"name": "rope", "scaling": LENGTH_DEPENDENT[scaling]}, sharpen)
    short, long = tokens(EXAMPLE), tokens(40)
    with torch.no_grad():  # what it gave is far outside the tolerance
        stale = model({"name": "rope", "scaling": AT_EXAMPLE[scaling]}, sharpen)
        assert_close(stale(short), lm(short))
        assert (stale(long) - lm(long)).abs().max() > 1e-2
    path = tmp_path / f"{scaling}.onnx"
    torch.onnx.export(
        lm, (tokens(EXAMPLE),), str(path), dynamo=True, dynamic_shapes=({1: seq_dim()},)
    )
    check_onnx_runtime(lm, path, PAST_ORIGINAL, model_tol)


# --- Hugging Face ---


class Logits(torch.nn.Module):
    """A transformers causal LM as ``ids -> logits``, without its KV cache (a DynamicCache
    in the output is no pytree torch.export knows)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


def extended_llama():
    """The tiny Llama of tests/hf/tiny_llama.py (original length 16) extended by YaRN to 64."""
    pytest.importorskip("transformers")
    from tests.hf.tiny_llama import llama_config, tiny_model

    llama = tiny_model(llama_config({"rope_type": "default"}))
    extend_context(llama, "yarn", 4)
    assert llama.config.rope_parameters["rope_type"] == "yarn"
    assert llama.model.rotary_emb.attention_scaling > 1  # YaRN's, not the default's 1
    return llama


def check_llama(program, wrapped, tol) -> None:
    """Logits of the exported program and of eager at 12 tokens and at 40, past the
    original 16: the same float32 graph, so rounding only, counted as tests/hf/tiny_llama.py's
    ``llama_tol`` counts it (its tables' term is room to spare here)."""
    from tests.hf.tiny_llama import llama_tol

    config = wrapped.model.config
    for length in (EXAMPLE, 40):
        ids = torch.randint(0, config.vocab_size, (BATCH, length))
        with torch.no_grad():
            expected = wrapped(ids)
            got = program.module()(ids)
        assert_close(got, expected, **llama_tol(tol, config, length, expected))


def test_llama_extended_with_yarn_exports_with_dynamic_length(tol):
    wrapped = Logits(extended_llama()).eval()
    ids = torch.randint(0, wrapped.model.config.vocab_size, (BATCH, EXAMPLE))
    program = torch.export.export(wrapped, (ids,), dynamic_shapes=({1: seq_dim()},))
    check_llama(program, wrapped, tol)


@pytest.mark.slow
def test_llama_with_posenc_rope_in_place_exports_with_dynamic_length(tol):
    """posenc's own RoPE (:func:`posenc.hf.rope_from_hf_config` of the extended config) as
    the model's rotary embedding: its rotation of position ids exports with a dynamic
    length (it reads no host value and checks no length)."""
    from tests.hf.tiny_llama import PosencRotary

    llama = extended_llama()
    llama.model.rotary_emb = PosencRotary(rope_from_hf_config(llama.config))
    wrapped = Logits(llama).eval()
    ids = torch.randint(0, llama.config.vocab_size, (BATCH, EXAMPLE))
    program = torch.export.export(wrapped, (ids,), dynamic_shapes=({1: seq_dim()},))
    check_llama(program, wrapped, tol)


@pytest.mark.parametrize("name", [case(n, []) for n in [*ONNX_NAMES, "fox", "plan"]])
def test_a_decode_step_over_a_static_cache_exports(name, sharpen, model_tol):
    """The one-token step over a StaticKVCache, exported once (``DecodeStep`` holds the
    cache's tensors as buffers: the program keeps their in-place writes), then run for four
    tokens: the logits of one eager forward over the whole sequence, and the program's
    count of tokens advanced by one per step. A plan's window and chunk layers keep rings."""
    lm = model(sharpen=sharpen, plan=PLAN) if name == "plan" else model(name, sharpen)
    ids = tokens(12)[:1]
    with torch.no_grad():
        full = lm(ids)
        cache = lm.new_cache(1, 16, static=True)
        lm(ids[:, :8], cache=cache)  # the prompt, eager
    program = torch.export.export(DecodeStep(lm, cache), (ids[:, 8:9],))
    run = program.module()
    with torch.no_grad():
        got = torch.cat([run(ids[:, i : i + 1]) for i in range(8, 12)], dim=1)
    assert int(run.filled) == 12
    assert_close(got, full[:, 8:], **model_tol(lm, 12, full))


FOX_PLAN = LayerPlan([LayerSpec("fox", window=1), LayerSpec("fox", window=3), LayerSpec("fox")])


@pytest.mark.parametrize("name", ["fox", "fox plan"])
def test_a_decode_step_takes_the_prompt_and_the_steps(name, model_tol):
    """One ``DecodeStep`` made over an empty cache runs the prompt and then the steps: the
    logits of one forward over the whole sequence. FoX's forget clocks (and each one's
    last, which the next tokens continue from) are the step's buffers from the start, in
    full layers, rings, and a ring of no slot (a window of 1)."""
    lm = model(plan=FOX_PLAN) if name == "fox plan" else model(name)
    ids = tokens(12)[:1]
    with torch.no_grad():
        full = lm(ids)
        step = DecodeStep(lm, lm.new_cache(1, 16, static=True))
        got = [step(ids[:, :8])] + [step(ids[:, i : i + 1]) for i in range(8, 12)]
    assert_close(torch.cat(got, 1), full, **model_tol(lm, 12, full))


def test_a_fox_plan_decode_step_exports_with_its_clocks(model_tol):
    """The exported step of a FoX plan keeps its clocks, and a window of 1's last clock,
    as buffers it writes in place: the logits of the eager forward, step after step."""
    lm = model(plan=FOX_PLAN)
    ids = tokens(12)[:1]
    with torch.no_grad():
        full = lm(ids)
        cache = lm.new_cache(1, 16, static=True)
        lm(ids[:, :8], cache=cache)
    run = torch.export.export(DecodeStep(lm, cache), (ids[:, 8:9],)).module()
    with torch.no_grad():
        got = torch.cat([run(ids[:, i : i + 1]) for i in range(8, 12)], dim=1)
    assert_close(got, full[:, 8:], **model_tol(lm, 12, full))


def test_a_decode_step_names_what_it_cannot_take():
    lm = model("rope")
    with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
        DecodeStep(None, lm.new_cache(1, 8, static=True))
    with pytest.raises(TypeError, match="cache must be a StaticKVCache"):
        DecodeStep(lm, lm.new_cache(1, 8))
    with pytest.raises(ValueError, match="cache has n_layers=1 but the model has 2"):
        DecodeStep(lm, posenc.StaticKVCache(1, 1, HEADS, DIM // HEADS, 8))
