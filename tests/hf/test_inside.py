"""posenc inside a loaded transformers model (:mod:`posenc.hf.apply`,
:mod:`posenc.hf.backend`, :mod:`posenc.hf.exact_rotary`): every model type the Hugging Face
tests build (``tests/hf/families.py``), against transformers' own logits and tokens.

Tolerances: the exact rotary tables differ from transformers' float32 ones by the float32
angle error, about ``p · 2^-23`` at position ``p`` (below 2e-6 at the 12 positions used
here); a logit moves by that times the weights' scale (about 1 here), and the backend's
softmax is summed in another order than SDPA's (a few ulp of the logits): 1e-5 holds both
with room.
"""

import copy
import sys
import warnings

import pytest
import torch

pytest.importorskip("transformers")

import transformers as T
from tests.hf import families as F

import posenc
from posenc.attn import attention
from posenc.attn.masks import AttentionContext
from posenc.hf import apply, undo
from posenc.hf.backend import NAME, posenc_attention, register
from posenc.hf.exact_rotary import ExactRotaryEmbedding

TOL = 1e-5
#: the model types that run only on transformers' eager attention (softcap, sinks)
EAGER_ONLY = ("gemma2", "gpt_oss")


def model_of(name):
    return F.build(F.make(name))


def ids_and_mask(batch=2, seq=12, pad=3):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, :pad] = 0  # the last row left-padded
    return ids, mask


def modeling_module(model):
    """The modeling module of ``model``'s attention layers (where its rotation lives)."""
    attention = next(m for m in model.modules() if type(m).__name__.endswith("Attention"))
    return sys.modules[type(attention).__module__]


def logits(model, ids, mask=None):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("name", sorted(F.CONFIGS))
def test_exact_rotary_gives_transformers_logits_and_undo_gives_them_back(name):
    model = model_of(name)
    ids, _ = ids_and_mask()
    before = logits(model, ids)
    originals = {
        n: m for n, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")
    }
    apply(model, rotary="exact")
    assert any(isinstance(m, ExactRotaryEmbedding) for m in model.modules())
    torch.testing.assert_close(logits(model, ids), before, atol=TOL, rtol=TOL)
    undo(model)
    assert torch.equal(logits(model, ids), before)
    after = {n: m for n, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")}
    assert after.keys() == originals.keys()
    assert all(after[n] is originals[n] for n in originals)  # the same objects, back


@pytest.mark.parametrize("name", sorted(F.CONFIGS))
def test_the_attention_backend_gives_transformers_logits_with_padding(name):
    model = model_of(name)
    ids, mask = ids_and_mask()
    model.set_attn_implementation("eager" if name in EAGER_ONLY else "sdpa")
    reference = logits(model, ids, mask)
    apply(model, rotary=None, attention=NAME)
    assert model.config._attn_implementation == NAME
    out = logits(model, ids, mask)
    torch.testing.assert_close(out[0], reference[0], atol=TOL, rtol=TOL)
    torch.testing.assert_close(out[1, 3:], reference[1, 3:], atol=TOL, rtol=TOL)  # real tokens
    undo(model)
    assert model.config._attn_implementation == ("eager" if name in EAGER_ONLY else "sdpa")


def test_m_rope_takes_transformers_three_axis_positions():
    """Qwen2.5-VL's text rotary embedding merges the sections of three position axes: the
    exact one gives its tables for positions that differ per axis (an image's grid)."""
    model = model_of("qwen2_5_vl")
    theirs = model.model.language_model.rotary_emb
    apply(model, rotary="exact")
    ours = model.model.language_model.rotary_emb
    assert isinstance(ours, ExactRotaryEmbedding)
    grid = torch.stack([torch.arange(10), torch.arange(10) // 3, torch.arange(10) % 3])
    x = torch.zeros(1, dtype=torch.bfloat16)
    for positions in (grid[:, None], torch.arange(10)[None]):  # three axes; text
        expected, got = theirs(x, positions), ours(x, positions)
        assert got[0].dtype == torch.bfloat16
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.float(), e.float(), atol=1e-2, rtol=0)  # bf16


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "linear", "factor": 4.0},
        {"rope_type": "dynamic", "factor": 4.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ],
    ids=lambda p: p["rope_type"],
)
def test_a_scaled_rope_gives_transformers_logits(rope_parameters):
    config = F.make("llama")
    config.rope_parameters = {"rope_theta": 10000.0, **rope_parameters}
    model = F.build(config)
    ids, mask = ids_and_mask(seq=24)  # past the original length of 16
    before = logits(model, ids, mask)
    apply(model)
    torch.testing.assert_close(logits(model, ids, mask), before, atol=TOL, rtol=TOL)


def test_latent_attention_and_a_bfloat16_model_keep_their_tables():
    """DeepSeek-V3's decoupled RoPE (latent attention) in bfloat16: the tables come back in
    the model's dtype and its logits are transformers' (bfloat16 rounding apart)."""
    config = T.DeepseekV3Config(
        vocab_size=64, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        n_routed_experts=2, num_experts_per_tok=1, first_k_dense_replace=1, n_group=1,
        topk_group=1, max_position_embeddings=64,
    )  # fmt: skip
    model = F.build(config).to(torch.bfloat16)
    ids, _ = ids_and_mask()
    before = logits(model, ids)
    apply(model)
    cos, _ = model.model.rotary_emb(torch.zeros(1, dtype=torch.bfloat16), torch.arange(4)[None])
    assert cos.dtype == torch.bfloat16
    torch.testing.assert_close(logits(model, ids), before, atol=0.05, rtol=0.05)


def test_dual_chunk_attention_is_refused_by_name_and_nothing_is_left_patched(tmp_path):
    config = T.Qwen2Config(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        intermediate_size=64, vocab_size=64, max_position_embeddings=4096,
        dual_chunk_attention_config={
            "chunk_size": 1024, "local_size": 64, "original_max_position_embeddings": 1024
        },
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    model = F.build(T.Qwen2Config.from_pretrained(tmp_path))
    own = model.model.rotary_emb
    with pytest.raises(ValueError, match="dual chunk attention"):
        apply(model)
    assert model.model.rotary_emb is own and not hasattr(model, "_posenc_applied")


def test_the_backend_is_called_and_refuses_what_it_cannot_run():
    model = model_of("llama")
    apply(model, rotary=None, attention=NAME)
    calls = []
    attn = model.model.layers[0].self_attn
    attn.register_forward_hook(lambda *a: calls.append(1))
    ids, mask = ids_and_mask()
    logits(model, ids, mask)
    assert calls
    q = torch.randn(1, 4, 3, 16)
    with pytest.raises(ValueError, match="dropout"):
        posenc_attention(attn, q, q, q, None, dropout=0.1)
    with pytest.raises(TypeError, match="boolean"):
        posenc_attention(attn, q, q, q, torch.zeros(1, 1, 3, 3))


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gpt_oss", "cohere2"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_gives_transformers_tokens(name, use_cache):
    model = model_of(name)
    ids, _ = ids_and_mask(batch=1, seq=5)
    kwargs = {"max_new_tokens": 10, "do_sample": False, "use_cache": use_cache}
    kwargs |= {"min_new_tokens": 10}
    with torch.no_grad():
        expected = model.generate(ids, **kwargs)
        apply(model, rotary="exact", attention=NAME)
        got = model.generate(ids, **kwargs)
    assert torch.equal(got, expected)


def test_at_long_positions_the_exact_rotary_stays_near_a_float64_reference():
    """Positions to 131,072, head 128, base 1e4: transformers' float32 angles drift with the
    position, posenc's do not (the reference: the model in float64 with float64-exact
    tables)."""
    config = T.LlamaConfig(
        vocab_size=64,
        hidden_size=256,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=131072,
    )
    torch.manual_seed(0)
    theirs = T.LlamaForCausalLM(config).eval()
    ours = apply(copy.deepcopy(theirs), rotary="exact")
    reference = apply(copy.deepcopy(theirs).double(), rotary="exact")
    ids = torch.randint(0, 64, (1, 16))
    errors = {}
    for start in (0, 131072 - 16):
        position_ids = torch.arange(start, start + 16)[None]
        with torch.no_grad():
            ref = reference(input_ids=ids, position_ids=position_ids).logits
            errors[start] = [
                float(
                    (m(input_ids=ids, position_ids=position_ids).logits.double() - ref).abs().max()
                )
                for m in (theirs, ours)
            ]
    far_theirs, far_ours = errors[131072 - 16]
    assert far_ours < 2 * max(errors[0]) + 1e-6  # posenc's error does not grow
    assert far_theirs > 10 * far_ours  # transformers' does


@pytest.mark.parametrize("encoding", ["nope", "alibi", "fire", "kerple", "p_rope"])
def test_a_llama_swapped_to_another_encoding_fine_tunes_and_decodes_as_it_recomputes(encoding):
    model = model_of("llama").train()
    every_other = (lambda i: i % 2 == 1) if encoding == "nope" else None
    apply(model, rotary=None, encoding=encoding, layers=every_other)
    new = [p for n, p in model.named_parameters() if "posenc_encoding" in n]
    assert all(p.requires_grad for p in new)
    torch.manual_seed(0)
    data = torch.randint(0, 64, (8, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = model(input_ids=data, labels=data).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if encoding in ("fire", "kerple"):
        assert new and all(p.grad is not None for p in new)  # the new parameters learned
    model.eval()
    kwargs = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    with torch.no_grad():
        cached = model.generate(data[:1, :5], use_cache=True, **kwargs)
        recomputed = model.generate(data[:1, :5], use_cache=False, **kwargs)
    assert torch.equal(cached, recomputed)


def test_a_swapped_layer_runs_unrotated_and_the_others_keep_rope():
    model = model_of("llama")
    ids, _ = ids_and_mask(batch=1)
    apply(model, rotary=None, encoding="nope", layers=[1])
    seen = {}
    for i, layer in enumerate(model.model.layers):  # after apply's hook: what the layer gets
        layer.self_attn.register_forward_pre_hook(
            lambda m, a, kw, i=i: seen.__setitem__(i, kw["position_embeddings"]), with_kwargs=True
        )
    logits(model, ids)
    assert seen[0][1].abs().max() > 0  # layer 0 rotates
    assert torch.equal(seen[1][0], torch.ones_like(seen[1][0]))  # layer 1: cos 1, sin 0
    assert torch.equal(seen[1][1], torch.zeros_like(seen[1][1]))
    undo(model)
    logits(model, ids)
    assert torch.equal(seen[1][0], seen[0][0])  # the tables again


def test_compiling_a_patched_model_gives_one_graph():
    model = apply(model_of("llama"), rotary="exact", attention=NAME)
    ids, _ = ids_and_mask(batch=1, seq=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explained = torch._dynamo.explain(model)(input_ids=ids)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_a_patched_model_saves_a_config_transformers_loads_without_posenc(tmp_path):
    model = model_of("llama")
    ids, _ = ids_and_mask()
    before = logits(model, ids)
    apply(model, rotary="exact", attention=NAME)
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = T.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert not any(isinstance(m, ExactRotaryEmbedding) for m in loaded.modules())
    assert torch.equal(logits(loaded, ids), before)


def test_bad_arguments_are_refused_by_name():
    model = model_of("llama")
    with pytest.raises(ValueError, match="rotary must be"):
        apply(model, rotary="fast")
    with pytest.raises(ValueError, match="attention must be"):
        apply(model, attention="flash")
    with pytest.raises(ValueError, match="not patched"):
        undo(model)
    with pytest.raises(ValueError, match="layers must be"):
        apply(model, encoding="alibi", layers=[7])
    with pytest.raises(ValueError, match="give encoding too"):
        apply(model, layers=[0])
    with pytest.raises(ValueError, match="'none' \\(NoPE\\), a bias encoding"):
        apply(model, encoding="sinusoidal")
    assert not hasattr(model, "_posenc_applied")  # a refused call leaves nothing behind
    assert model.config._attn_implementation == "sdpa"
    apply(model)
    with pytest.raises(ValueError, match="patched already"):
        apply(model)


def test_a_model_without_rotary_is_refused_by_name():
    config = T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = T.GPT2LMHeadModel(config).eval()
    with pytest.raises(ValueError, match="no rotary embedding"):
        apply(model)


def test_register_is_idempotent():
    assert register() == register() == NAME


# --- attn_mask: a mask made elsewhere, on every backend ---------------------------------


@pytest.mark.parametrize("backend", ["math", "sdpa", "flex"])
def test_a_given_mask_equals_the_same_mask_from_positions_and_padding(backend):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    padding = torch.tensor([[True] * 5, [False, False, True, True, True]])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    given = (causal[None] & padding[:, None, :])[:, None]  # [2, 1, 5, 5]
    context = AttentionContext.build(5, 5, 2, q.device, attn_mask=given)
    out = attention(q, k, v, causal=False, context=context, backend=backend)
    expected = attention(q, k, v, causal=True, key_padding_mask=padding, backend=backend)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        (torch.ones(2, 1, 5, 5), TypeError, "bool"),
        (torch.ones(2, 5, 5, dtype=torch.bool), ValueError, "batch \\| 1, 1, q_len, k_len"),
        (torch.ones(3, 1, 5, 5, dtype=torch.bool), ValueError, "batch \\| 1"),
        (torch.ones(2, 2, 5, 5, dtype=torch.bool), ValueError, "batch \\| 1"),
        (torch.ones(2, 1, 5, 4, dtype=torch.bool), ValueError, "q_len, k_len"),
        (torch.ones(2, 1, 5, 5, dtype=torch.bool, device="meta"), ValueError, "move attn_mask"),
    ],
)
def test_a_bad_given_mask_is_refused_by_name(mask, error, match):
    with pytest.raises(error, match=match):
        AttentionContext.build(5, 5, 2, torch.device("cpu"), attn_mask=mask)


def test_a_batch_of_one_mask_serves_every_row():
    mask = torch.tensor([True, False, True]).view(1, 1, 1, 3)
    context = AttentionContext.build(1, 3, 2, torch.device("cpu"), attn_mask=mask)
    assert context.masks is not None and context.masks.attn_mask.shape == (2, 1, 1, 3)
    kept = context.last_keys(2).masks  # a rolling cache's layer: the last two keys
    assert kept is not None and kept.attn_mask.tolist() == [[[[False, True]]]] * 2


# --- kernel="triton": the rotation by posenc's kernel (Triton's interpreter here) ---------


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt_neox"])
def test_the_triton_rotation_gives_transformers_logits_and_undo_restores_it(name):
    pytest.importorskip("triton")
    from posenc.hf import triton_rotation

    model = model_of(name)
    ids, mask = ids_and_mask()
    before = logits(model, ids, mask)
    module = modeling_module(model)
    own = module.apply_rotary_pos_emb
    calls = []
    kernel = triton_rotation.rotate_with_triton
    triton_rotation.rotate_with_triton = lambda *a: calls.append(1) or kernel(*a)
    try:
        apply(model, rotary="exact", kernel="triton")
        assert module.apply_rotary_pos_emb is not own
        out = logits(model, ids, mask)
    finally:
        triton_rotation.rotate_with_triton = kernel
    # the partial rotary of GPT-NeoX keeps the model's own rotation
    assert bool(calls) == (name != "gpt_neox")
    torch.testing.assert_close(out[0], before[0], atol=TOL, rtol=TOL)
    torch.testing.assert_close(out[1, 3:], before[1, 3:], atol=TOL, rtol=TOL)
    undo(model)
    assert module.apply_rotary_pos_emb is own


def test_the_triton_rotation_refuses_what_it_cannot_run(monkeypatch):
    pytest.importorskip("triton")
    from posenc.hf import triton_rotation

    model = model_of("cohere2")  # interleaved pairs
    module = modeling_module(model)
    own = module.apply_rotary_pos_emb
    with pytest.raises(ValueError, match="does not rotate pairs of halves"):
        apply(model, kernel="triton")
    assert module.apply_rotary_pos_emb is own and not triton_rotation._PATCHED
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="kernel='triton' needs Triton and CUDA"):
        apply(model_of("llama"), kernel="triton")
    with pytest.raises(ValueError, match="kernel must be"):
        apply(model, kernel="cuda")


def test_two_models_of_one_type_share_the_patch_until_the_last_is_undone():
    pytest.importorskip("triton")
    first, second = model_of("llama"), model_of("llama")
    module = modeling_module(first)
    own = module.apply_rotary_pos_emb
    apply(first, kernel="triton")
    apply(second, kernel="triton")
    undo(first)
    assert module.apply_rotary_pos_emb is not own  # the second still rotates by the kernel
    undo(second)
    assert module.apply_rotary_pos_emb is own


def test_p_rope_in_place_of_rope_stops_turning_the_lowest_frequencies():
    model = model_of("llama")
    ids, _ = ids_and_mask(batch=1)
    apply(model, rotary=None, encoding={"name": "p_rope", "p": 0.75}, layers=[0])
    seen = {}
    model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda m, a, kw: seen.update(tables=kw["position_embeddings"]), with_kwargs=True
    )
    logits(model, ids)
    cos, sin = seen["tables"]  # [1, 12, 16]: 8 pairs, each frequency twice ("cat")
    assert torch.equal(cos[..., 6:8], torch.ones_like(cos[..., 6:8]))  # the lowest quarter
    assert torch.equal(sin[..., 14:16], torch.zeros_like(sin[..., 14:16]))
    rope = posenc.create("rope", head_dim=16)
    expected, _ = rope.rotation(torch.arange(12)[None])
    torch.testing.assert_close(cos[..., :6], expected[..., :6])  # the rest as RoPE's
    with pytest.raises(ValueError, match="turns 4 pairs"):
        apply(model_of("llama"), encoding={"name": "rope", "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match="RoPE or p-RoPE"):
        apply(model_of("llama"), encoding="xpos")


def test_host_reads_one_per_layer_and_one_for_the_positions_and_none_with_validation_off():
    """posenc's checks read the host once per layer (whether q, k and v are finite: the NaN
    rule) and once per forward (the positions of the exact tables); with validation off a
    patched model reads nothing, as transformers' own (a GPU never waits on the host)."""
    from tests.attn.test_core import host_reads

    model = apply(model_of("llama"), attention=NAME)  # two layers
    ids, _ = ids_and_mask(batch=1)
    with torch.no_grad():
        model(input_ids=ids)
        assert host_reads(lambda: model(input_ids=ids)) == 3
        with posenc.validation(False):
            assert host_reads(lambda: model(input_ids=ids)) == 0
