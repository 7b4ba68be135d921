"""Attention patterns against transformers' own code (5.24): Mistral's sliding window, Llama 4's
chunks and attention temperature, gpt-oss's sinks, Gemma 2's soft cap, ModernBERT's local
window and Cohere2's rotary-on-local-layers rule.

What each model's window means in transformers, read off its masking code (the tests below
hold posenc to it):

- Mistral, gpt-oss, Gemma 2, Cohere2 (``create_sliding_window_causal_mask``, i.e.
  ``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``, with the causal
  ``kv_idx <= q_idx``): a query sees the last ``W = config.sliding_window`` keys, its own
  included, ``i - W < j <= i``: posenc's ``window=W``.
- ModernBERT: ``config.sliding_window`` is ``local_attention // 2`` and the bidirectional
  overlay keeps ``|i - j| <= sliding_window``: posenc's ``window=local_attention,
  causal=False`` (an odd ``local_attention`` rounds down, as posenc's ``W // 2``). Its
  attention module stores ``sliding_window + 1`` for flash attention's bounds, which the
  eager and SDPA paths do not read.
- Llama 4 (``chunked_overlay``): ``(j - pad) // C == (i - pad) // C``, ``pad`` the row's
  left padding, so chunks start at the first real token: posenc's ``chunk=C`` over
  positions that count real tokens only (``posenc.positions.from_padding``).
- Packed sequences (``position_ids`` restarting at 0, no padding mask, no cache):
  transformers evaluates the window or chunk on ``position_ids`` and adds a same-document
  mask: posenc's positions from ``from_segments`` with ``segment_ids``.

Numerics: posenc runs in float32, transformers' eager functions in float64 where their code
keeps it (gpt-oss; Gemma 2's softmax is float32 whatever the input) and the masks become a
float64 softmax here. :func:`bound` gives the tolerance from the inputs (see there): for
unit-variance q, k, v at these sizes it is ~1e-5, while a key seen or hidden by mistake moves
an output by ~1e-1.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.runners.flex import flex_available
from posenc.hf import rope_from_hf_config
from posenc.positions import from_padding, from_segments

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Cohere2Config,
    DynamicCache,
    Gemma2Config,
    GptOssConfig,
    Llama4TextConfig,
    MistralConfig,
    ModernBertConfig,
)
from transformers.masking_utils import (  # noqa: E402
    chunked_causal_mask_function,
    create_bidirectional_sliding_window_mask,
    create_causal_mask,
    create_chunked_causal_mask,
    create_sliding_window_causal_mask,
    sliding_window_bidirectional_mask_function,
    sliding_window_causal_mask_function,
)
from transformers.models.cohere2.modeling_cohere2 import (  # noqa: E402
    Cohere2Attention,
    Cohere2RotaryEmbedding,
)
from transformers.models.gemma2 import modeling_gemma2  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.llama4.modeling_llama4 import Llama4TextAttention  # noqa: E402
from transformers.models.mistral.modeling_mistral import (  # noqa: E402
    MistralAttention,
    MistralRotaryEmbedding,
)

EPS = torch.finfo(torch.float32).eps
BATCH, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 16
HIDDEN = HEADS * HEAD_DIM
#: a tiny config of every model here (no token ids: they would be out of the tiny vocab)
TINY = dict(
    hidden_size=HIDDEN,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    head_dim=HEAD_DIM,
    vocab_size=32,
    intermediate_size=64,
    pad_token_id=None,
    bos_token_id=None,
    eos_token_id=None,
)
#: query and key counts: a prefill of 13 tokens, and 13 queries after 24 cached keys, so that
#: windows and chunks cross flex's blocks and the query offset
LAYOUTS = {"prefill": (13, 13), "cache": (13, 37)}
FLEX = flex_available(torch.device("cpu"))


def flex_case_slow(flex_case, *axes):
    """The cases of a test, the product of ``axes``, with the one whose ``run_all`` compiles
    flex (a few seconds of a cold inductor cache, 15-20 s on busy cores) in ``make
    test-slow``; the other cases, and flex in the Llama 4 padding and Gemma 2 tests, stay
    in the default suite."""
    return [
        pytest.param(*case, marks=pytest.mark.slow) if case == flex_case else case
        for case in itertools.product(*axes)
    ]


def qkv(q_len, k_len, dtype=torch.float32):
    return (
        torch.randn(BATCH, HEADS, q_len, HEAD_DIM, dtype=dtype),
        torch.randn(BATCH, KV_HEADS, k_len, HEAD_DIM, dtype=dtype),
        torch.randn(BATCH, KV_HEADS, k_len, HEAD_DIM, dtype=dtype),
    )


def zero_t5():
    """A bias encoding whose bias is 0: plain attention through the bias encodings' runners."""
    enc = posenc.create("t5", n_heads=HEADS)
    torch.nn.init.zeros_(enc.weight)
    return enc


def run_all(q, k, v, flex=None, **kwargs):
    """posenc.attention through every backend that runs the call, with no encoding and with
    :func:`zero_t5` (the bias encodings' runners), under no grad: ``{name: output}``. SDPA
    refuses softcap and sinks and flex sinks, as posenc.attention documents. Compiled flex
    costs seconds per case on the CPU, so it runs where ``flex`` asks: ``"plain"`` (no
    encoding) or ``"bias"`` (:func:`zero_t5`), one or two cases of each test."""
    zero = zero_t5()
    names = ["auto", "math"]
    if kwargs.get("sinks") is None and kwargs.get("softcap") is None:
        names.append("sdpa")
    outs = {}
    with torch.no_grad():  # compiled flex has no backward on the CPU
        for backend in names:
            outs[backend] = posenc.attention(q, k, v, backend=backend, **kwargs)
            outs[f"{backend}+bias"] = posenc.attention(q, k, v, zero, backend=backend, **kwargs)
        if FLEX and flex is not None:
            enc = zero if flex == "bias" else None
            outs[f"flex ({flex})"] = posenc.attention(q, k, v, enc, backend="flex", **kwargs)
    return outs


def positions_grid(fn, batch, q_pos, k_pos):
    """A transformers mask function (``fn(batch_idx, head_idx, q_idx, kv_idx)``, index based)
    evaluated over the grid of positions, as its ``sdpa_mask`` broadcasts it: ``[batch, 1,
    q_len, k_len]`` bool."""
    b = torch.arange(batch)[:, None, None, None]
    h = torch.zeros(1, dtype=torch.long)[None, :, None, None]
    return fn(b, h, q_pos[None, None, :, None], k_pos[None, None, None, :]).expand(
        batch, 1, len(q_pos), len(k_pos)
    )


def reference(q, k, v, allowed, scale=None, bias=None):
    """softmax(q kᵀ·scale + bias) v in float64 over the keys ``allowed`` (``[b | 1, 1 | h, q,
    k]`` bool), key/value heads repeated; a row that sees no key is 0. Returns ``(out,
    weights)``."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, 1)
    v64 = v.double().repeat_interleave(group, 1)
    scores = q.double() @ k64.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias.double()
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return weights @ v64, weights


def bound(
    q,
    k,
    v,
    weights,
    scale=None,
    bias=None,
    *,
    extra_n=0,
    angle=None,
    sides=1,
    out_proj=None,
    float32_softmax=False,
):
    """``assert_close`` tolerances for float32 attention against the exact result: ``q, k``
    as the scores see them (rotated), ``weights`` the exact ones (float64 ``[b, h, q, k]``,
    with any sink in their normaliser).

    Score ``j`` of row ``i`` (a dot product over ``d``, the scale, a bias) is off by at most
    ``δ_j = (d + 4 + extra_n)·eps·(scale·Σ_l |q_l k_l| + |bias_j|)``; ``extra_n`` counts
    further roundings of a value at most that large (a soft cap: three, tanh being
    1-Lipschitz; a temperature: one). A float32 rotation by angles up to ``angle`` adds
    ``(angle + 3)·eps`` to each cos, sin and rotated entry of q and of k: ``4·(angle + 3)·
    eps·scale·‖q‖‖k_j‖`` (Cauchy-Schwarz on each pair). The output's channel moves by
    ``Σ_j w_j δ_j (v_j - out)`` to first order (``∂out/∂s_j = w_j (v_j - out)``; a sink's
    logit is exact and carries no value); the normaliser and the weighted sum add
    ``(2·k_len + 2)·eps·Σ_j w_j |v_j|``. The largest over rows and channels is ``atol``: a
    bound, not an estimate (~1e-5 here; a key seen or hidden by mistake moves an output by
    ~1e-1). ``sides=2``: two float32 computations, each within it of the exact result.
    ``float32_softmax``: the reference's softmax ran in float32 (Gemma 2's), ``(k_len + 2)·
    eps·Σ_j w_j |v_j|`` more. ``out_proj``: a weight both sides' outputs then go through in
    float32.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    q64 = q.detach().double()
    k64 = k.detach().double().repeat_interleave(group, 1)
    v64 = v.detach().double().repeat_interleave(group, 1)
    w = weights.detach().double()
    size = scale * (q64.abs() @ k64.abs().transpose(-1, -2))  # [b, h, q, k]
    if bias is not None:
        size = size + bias.detach().double().abs()
    delta = (q.shape[-1] + 4 + extra_n) * EPS * size
    if angle is not None:
        norms = q64.norm(dim=-1)[..., None] * k64.norm(dim=-1)[..., None, :]
        delta = delta + 4 * (angle + 3) * EPS * scale * norms
    out = w @ v64
    spread = (v64[:, :, None] - out[:, :, :, None]).abs()  # |v_j - out_i|: [b, h, q, k, d]
    moved = ((w * delta)[..., None] * spread).sum(-2)  # [b, h, q, d]
    sums = w @ v64.abs()
    normaliser = (2 * k.shape[-2] + 2) * EPS * sums
    atol = sides * (moved + normaliser).max().item()
    if float32_softmax:
        atol += (k.shape[-2] + 2) * EPS * sums.max().item()
    if out_proj is not None:
        rows = out_proj.detach().double().abs().sum(-1).max().item()
        largest = out.abs().max().item()
        atol = rows * (atol + sides * out_proj.shape[-1] * EPS * largest)
    return {"atol": atol, "rtol": 0.0}


def check_all(outs, expected, rounding):
    for name, out in outs.items():
        assert_close(out.double(), expected, **rounding, msg=lambda m, n=name: f"{n}: {m}")


def default_positions(q_len, k_len):
    """posenc's default: the queries are the last ``q_len`` of the ``k_len`` keys."""
    return torch.arange(k_len - q_len, k_len), torch.arange(k_len)


def split_heads(x, heads):
    """``[b, s, heads·d]`` -> ``[b, heads, s, d]``."""
    return x.view(x.shape[0], x.shape[1], heads, HEAD_DIM).transpose(1, 2)


def merge_heads(x):
    """``[b, heads, s, d]`` -> ``[b, s, heads·d]``."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


# --- Mistral: the sliding window ------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "layout"), flex_case_slow((4, "cache"), [1, 4, 9], sorted(LAYOUTS))
)
def test_mistral_sliding_window_mask_function(window, layout):
    """``window=W`` is transformers' ``sliding_window_causal_mask_function(W)`` evaluated at the
    positions (as ``sdpa_mask`` does, with the cache's query offset), on every backend."""
    q_len, k_len = LAYOUTS[layout]
    q_pos, k_pos = default_positions(q_len, k_len)
    allowed = positions_grid(sliding_window_causal_mask_function(window), BATCH, q_pos, k_pos)
    causal = k_pos[None, :] <= q_pos[:, None]
    assert (allowed[0, 0] != causal).any()  # the window hides keys: it is what is tested
    q, k, v = qkv(q_len, k_len)
    expected, weights = reference(q, k, v, allowed)
    flex = "plain" if (window, layout) == (4, "cache") else None
    check_all(run_all(q, k, v, flex, window=window), expected, bound(q, k, v, weights))


def _mistral_config(window):
    config = MistralConfig(**TINY, num_hidden_layers=1, sliding_window=window)
    config._attn_implementation = "sdpa"  # boolean masks
    return config


def test_mistral_mask_over_its_sliding_cache_with_padding():
    """transformers' sliding cache keeps the last ``W - 1`` keys: its mask over them (a
    step of 13 queries after 24 tokens, right padding in the step) is posenc's window over
    the kept keys' positions, with ``key_padding_mask``."""
    window = 5
    config = _mistral_config(window)
    cache = DynamicCache(config=config)
    past = torch.randn(BATCH, KV_HEADS, 24, HEAD_DIM)
    cache.update(past, past, 0)
    padding = torch.ones(BATCH, 37, dtype=torch.long)
    padding[1, -2:] = 0
    x = torch.randn(BATCH, 13, HIDDEN)
    mask = create_sliding_window_causal_mask(
        config=config, inputs_embeds=x, attention_mask=padding, cache=cache
    )
    kept = window - 1  # the keys the cache holds besides this step's 13
    assert mask.shape == (BATCH, 1, 13, kept + 13)
    q_pos, k_pos = torch.arange(24, 37), torch.arange(24 - kept, 37)
    q, k, v = qkv(13, kept + 13)
    expected, weights = reference(q, k, v, mask)
    outs = run_all(
        q,
        k,
        v,
        window=window,
        q_positions=q_pos,
        k_positions=k_pos,
        key_padding_mask=padding[:, 24 - kept :].bool(),
    )
    check_all(outs, expected, bound(q, k, v, weights))


@pytest.mark.parametrize("window", [3, 7])
def test_mistral_packed_sequences(window):
    """Packed documents (``position_ids`` restarting, transformers' packed format): the window
    follows the positions inside each document, as posenc's with ``segment_ids``."""
    config = _mistral_config(window)
    segments = torch.tensor([[0] * 10 + [1] * 20 + [2] * 7, [0] * 30 + [1] * 7])
    positions = from_segments(segments)
    mask = create_sliding_window_causal_mask(
        config=config,
        inputs_embeds=torch.randn(BATCH, 37, HIDDEN),
        attention_mask=None,
        cache=None,
        position_ids=positions,
    )
    q, k, v = qkv(37, 37)
    expected, weights = reference(q, k, v, mask)
    outs = run_all(
        q, k, v, window=window, segment_ids=segments, q_positions=positions, k_positions=positions
    )
    check_all(outs, expected, bound(q, k, v, weights))


def test_mistral_attention_module_with_its_cache():
    """MistralAttention (eager, its rotary embedding, its sliding cache: a prefill of 24
    tokens, then 13) equals posenc's rope with ``window=``, the cached step in the KV-cache
    layout over all 37 keys (default positions: the window hides those the cache dropped)."""
    window = 5
    config = _mistral_config(window)
    config._attn_implementation = "eager"
    attn = MistralAttention(config, layer_idx=0).eval()
    cos, sin = MistralRotaryEmbedding(config)(torch.zeros(1), torch.arange(37)[None])
    x = torch.randn(BATCH, 37, HIDDEN)
    cache = DynamicCache(config=config)
    rope = rope_from_hf_config(config)
    steps = []
    with torch.no_grad():
        for step in (slice(0, 24), slice(24, 37)):
            mask = create_sliding_window_causal_mask(
                config=config, inputs_embeds=x[:, step], attention_mask=None, cache=cache
            )
            steps.append(attn(x[:, step], (cos[:, step], sin[:, step]), mask, cache=cache)[0])
        expected = torch.cat(steps, 1)
        q = split_heads(attn.q_proj(x), HEADS)
        k = split_heads(attn.k_proj(x), KV_HEADS)
        v = split_heads(attn.v_proj(x), KV_HEADS)
        q_pos, k_pos = default_positions(37, 37)
        allowed = (k_pos <= q_pos[:, None]) & (k_pos > q_pos[:, None] - window)
        rq, rk = rope(q, k)
        _, weights = reference(rq, rk, v, allowed)
        # both sides rotate in float32, by angles up to 36 rad (first frequency 1 rad)
        rounding = bound(rq, rk, v, weights, angle=36, sides=2, out_proj=attn.o_proj.weight)
        for backend in ("auto", "sdpa"):
            prefill = posenc.attention(
                q[:, :, :24], k[:, :, :24], v[:, :, :24], rope, window=window, backend=backend
            )
            step = posenc.attention(q[:, :, 24:], k, v, rope, window=window, backend=backend)
            got = attn.o_proj(merge_heads(torch.cat([prefill, step], 2)))
            assert_close(got, expected, **rounding, msg=backend)
        full = attn.o_proj(merge_heads(posenc.attention(q, k, v, rope)))
    assert (full - expected).abs().max() > 100 * rounding["atol"]  # the window is tested


# --- Llama 4: chunked attention and the attention temperature --------------------------------


@pytest.mark.parametrize(("chunk", "layout"), flex_case_slow((8, "cache"), [4, 8], sorted(LAYOUTS)))
def test_llama4_chunked_mask_function(chunk, layout):
    """``chunk=C`` is transformers' ``chunked_causal_mask_function(C, no left padding)`` at
    the positions, on every backend."""
    q_len, k_len = LAYOUTS[layout]
    q_pos, k_pos = default_positions(q_len, k_len)
    fn = chunked_causal_mask_function(chunk, torch.zeros(BATCH, dtype=torch.long))
    allowed = positions_grid(fn, BATCH, q_pos, k_pos)
    q, k, v = qkv(q_len, k_len)
    expected, weights = reference(q, k, v, allowed)
    flex = "bias" if (chunk, layout) == (8, "cache") else None
    check_all(run_all(q, k, v, flex, chunk=chunk), expected, bound(q, k, v, weights))


def _llama4_config(**changes):
    config = Llama4TextConfig(
        **TINY,
        num_hidden_layers=2,
        no_rope_layers=[1, 0],  # layer 0 rotary and chunked, layer 1 NoPE and global
        attention_chunk_size=4,
        intermediate_size_mlp=64,
        **changes,
    )
    config._attn_implementation = "sdpa"
    return config


def test_llama4_chunks_start_after_left_padding():
    """With left padding transformers starts the chunks at each row's first real token:
    posenc's chunks over ``from_padding`` positions, pad keys hidden. Pad queries are not
    compared (transformers' rows for them see nothing; posenc gives them the positions' 0)."""
    config = _llama4_config()
    assert config.layer_types == ["chunked_attention", "full_attention"]
    padding = torch.ones(BATCH, 13, dtype=torch.long)
    padding[1, :3] = 0
    mask = create_chunked_causal_mask(
        config=config,
        inputs_embeds=torch.randn(BATCH, 13, HIDDEN),
        attention_mask=padding,
        cache=None,
    )
    q, k, v = qkv(13, 13)
    expected, weights = reference(q, k, v, mask)
    positions = from_padding(padding)
    outs = run_all(
        q,
        k,
        v,
        "plain",
        chunk=4,
        q_positions=positions,
        k_positions=positions,
        key_padding_mask=padding.bool(),
    )
    real = padding.bool()[:, None, :, None].expand_as(expected)
    rounding = bound(q, k, v, weights)
    for name, out in outs.items():
        assert_close(out.double()[real], expected[real], **rounding, msg=name)
        assert out.isfinite().all()
    # the offset is what is tested: chunks from the row's start would differ
    by_index = posenc.attention(q, k, v, chunk=4, key_padding_mask=padding.bool())
    assert (by_index[1:, :, 3:] - expected[1:, :, 3:]).abs().max() > 1e-2


def test_llama4_packed_chunks():
    """Packed documents: transformers chunks each document from its own start (the mask
    function at ``position_ids``), as posenc's ``chunk=`` over ``from_segments`` positions."""
    config = _llama4_config()
    segments = torch.tensor([[0] * 6 + [1] * 31, [0] * 17 + [1] * 20])
    positions = from_segments(segments)
    mask = create_chunked_causal_mask(
        config=config,
        inputs_embeds=torch.randn(BATCH, 37, HIDDEN),
        attention_mask=None,
        cache=None,
        position_ids=positions,
    )
    q, k, v = qkv(37, 37)
    expected, weights = reference(q, k, v, mask)
    outs = run_all(
        q, k, v, chunk=4, segment_ids=segments, q_positions=positions, k_positions=positions
    )
    check_all(outs, expected, bound(q, k, v, weights))


def test_llama4_temperature_formula():
    """``query_temperature`` is Llama 4's ``log1p(floor((position + 1) / floor_scale)) ·
    attn_scale + 1`` (modeling_llama4, Llama4TextAttention.forward) at its defaults, across
    the floors' edges, in float32 as there."""
    from posenc.attn import temperature

    positions = torch.tensor([0, 1, 8190, 8191, 8192, 16382, 16383, 100_000, 1_000_000])
    got = temperature.query_temperature(positions, floor_scale=8192, attn_scale=0.1)
    # transformers' expression, verbatim
    expected = torch.log1p(torch.floor((positions.float() + 1.0) / 8192)) * 0.1 + 1.0
    assert_close(got.float().reshape(expected.shape), expected, atol=0, rtol=2 * EPS)
    flat = got.reshape(-1)
    assert flat[2] == 1 and flat[3] > 1  # 8191 is the first position scaled up


def test_llama4_temperature_tuning_in_its_attention():
    """Llama4TextAttention on a NoPE layer with temperature tuning (floor_scale 4, so that the
    floors change within 37 tokens; a prefill of 24 with a cache, then 13) equals
    posenc.attention of q times ``query_temperature(positions)``."""
    from posenc.attn import temperature

    config = _llama4_config(floor_scale=4, attn_scale=0.5, attn_temperature_tuning=True)
    config._attn_implementation = "eager"
    attn = Llama4TextAttention(config, layer_idx=1).eval()
    assert not attn.use_rope
    x = torch.randn(BATCH, 37, HIDDEN)
    cache = DynamicCache(config=config)
    expected = []
    with torch.no_grad():
        for start, stop in ((0, 24), (24, 37)):  # the causal mask, additive as eager takes it
            seen = torch.arange(stop) <= torch.arange(start, stop)[:, None]
            mask = torch.zeros(seen.shape).masked_fill(~seen, torch.finfo(torch.float32).min)
            out, _ = attn(x[:, start:stop], None, mask[None, None], cache=cache)
            expected.append(out)
        expected = torch.cat(expected, 1)
        q = split_heads(attn.q_proj(x), HEADS)
        k = split_heads(attn.k_proj(x), KV_HEADS)
        v = split_heads(attn.v_proj(x), KV_HEADS)
        scales = temperature.query_temperature(torch.arange(37), floor_scale=4, attn_scale=0.5)
        hot = q * scales.reshape(1, 1, 37, 1).to(q.dtype)
        got = attn.o_proj(merge_heads(posenc.attention(hot, k, v)))
        _, weights = reference(hot, k, v, torch.ones(37, 37, dtype=torch.bool).tril())
        # the temperature's own product: one rounding of each q entry, on each side
        rounding = bound(hot, k, v, weights, extra_n=1, sides=2, out_proj=attn.o_proj.weight)
        assert_close(got, expected, **rounding)
        cold = attn.o_proj(merge_heads(posenc.attention(q, k, v)))
    assert (cold - expected).abs().max() > 100 * rounding["atol"]


# --- gpt-oss: attention sinks ---------------------------------------------------------------


def _gpt_oss_mask(layer, q_len):
    """gpt-oss's own additive mask for a prefill of ``q_len`` (eager: 0 or the dtype's
    minimum), as float64."""
    config = GptOssConfig(**TINY, num_hidden_layers=2, sliding_window=5)
    assert config.layer_types == ["sliding_attention", "full_attention"]
    config._attn_implementation = "eager"
    make = create_sliding_window_causal_mask if layer == "sliding" else create_causal_mask
    mask = make(
        config=config,
        inputs_embeds=torch.randn(BATCH, q_len, HIDDEN, dtype=torch.float64),
        attention_mask=None,
        cache=None,
    )
    return config, mask


@pytest.mark.parametrize("layer", ["sliding", "full"])
def test_gpt_oss_sink_softmax(layer):
    """``sinks=`` is gpt-oss's ``eager_attention_forward`` (one learned logit per head in the
    softmax, carrying no value), with its sliding window (5) on the sliding layers, on every
    backend; transformers runs in float64 here."""
    config, mask = _gpt_oss_mask(layer, 37)
    sinks = 2 * torch.randn(HEADS)
    module = SimpleNamespace(
        sinks=sinks.double(), num_key_value_groups=HEADS // KV_HEADS, training=False
    )
    q, k, v = qkv(37, 37)
    scale = HEAD_DIM**-0.5
    expected, weights = modeling_gpt_oss.eager_attention_forward(
        module, q.double(), k.double(), v.double(), mask, scaling=scale
    )
    expected = expected.transpose(1, 2)  # [b, s, h, d] -> [b, h, s, d]
    window = config.sliding_window if layer == "sliding" else None
    outs = run_all(q, k, v, sinks=sinks, window=window)
    check_all(outs, expected, bound(q, k, v, weights))
    plain = posenc.attention(q, k, v, window=window)
    assert (plain - expected).abs().max() > 1e-2  # the sinks take weight: they are tested


# --- Gemma 2: the soft cap ------------------------------------------------------------------


@pytest.mark.parametrize("softcap", [50.0, 2.0])
@pytest.mark.parametrize("layer", ["sliding", "full"])
def test_gemma2_softcap(layer, softcap):
    """``softcap=c`` with ``scale=query_pre_attn_scalar ** -0.5`` is Gemma 2's
    ``eager_attention_forward(..., scaling=, softcap=)`` under its own mask (window 5 on the
    sliding layers), on every backend. q is scaled up so that Gemma 2's cap of 50 bites."""
    config = Gemma2Config(
        **TINY,
        num_hidden_layers=2,
        sliding_window=5,
        query_pre_attn_scalar=4,
        attn_logit_softcapping=softcap,
    )
    config._attn_implementation = "eager"
    assert config.layer_types == ["sliding_attention", "full_attention"]
    make = create_sliding_window_causal_mask if layer == "sliding" else create_causal_mask
    mask = make(
        config=config,
        inputs_embeds=torch.randn(BATCH, 37, HIDDEN, dtype=torch.float64),
        attention_mask=None,
        cache=None,
    )
    module = SimpleNamespace(
        head_dim=HEAD_DIM, num_key_value_groups=HEADS // KV_HEADS, training=False
    )
    q, k, v = qkv(37, 37)
    q = q * (10.0 if softcap > 10 else 1.0)
    scale = config.query_pre_attn_scalar**-0.5
    expected, weights = modeling_gemma2.eager_attention_forward(
        module,
        q.double(),
        k.double(),
        v.double(),
        mask,
        dropout=0.0,
        scaling=scale,
        softcap=config.attn_logit_softcapping,
    )
    expected = expected.transpose(1, 2)  # [b, s, h, d] -> [b, h, s, d]
    window = config.sliding_window if layer == "sliding" else None
    flex = "bias" if (layer, softcap) == ("sliding", 2.0) else None
    outs = run_all(q, k, v, flex, softcap=softcap, scale=scale, window=window)
    # c·tanh(s/c): three roundings of a value at most |s|; Gemma 2's softmax runs in float32
    # even on float64 input
    rounding = bound(q, k, v, weights, scale=scale, extra_n=3, float32_softmax=True)
    check_all(outs, expected, rounding)
    uncapped = posenc.attention(q, k, v, scale=scale, window=window)
    assert (uncapped - expected).abs().max() > 1e-2  # the cap bites


# --- ModernBERT: the bidirectional local window ---------------------------------------------


@pytest.mark.parametrize(("local_attention",), flex_case_slow((5,), [4, 5, 8]))
def test_modernbert_local_window(local_attention):
    """ModernBERT's local layers (``local_attention=W``: transformers'
    ``create_bidirectional_sliding_window_mask``, ``|i - j| <= W // 2``, with the padding
    mask) are posenc's ``window=W, causal=False`` with ``key_padding_mask``, on every backend.
    A pad query whose window holds only pads sees nothing: 0 on both sides."""
    config = ModernBertConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_hidden_layers=3,
        vocab_size=32,
        intermediate_size=64,
        local_attention=local_attention,
        global_attn_every_n_layers=3,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        cls_token_id=None,
        sep_token_id=None,
    )
    config._attn_implementation = "sdpa"
    assert config.sliding_window == local_attention // 2
    padding = torch.ones(BATCH, 37, dtype=torch.long)
    padding[1, 30:] = 0
    mask = create_bidirectional_sliding_window_mask(
        config=config,
        inputs_embeds=torch.randn(BATCH, 37, HIDDEN),
        attention_mask=padding,
        allow_is_bidirectional_skip=False,
    )
    q, k, v = (torch.randn(BATCH, HEADS, 37, HEAD_DIM) for _ in range(3))
    expected, weights = reference(q, k, v, mask)
    flex = "plain" if local_attention == 5 else None
    outs = run_all(
        q, k, v, flex, window=local_attention, causal=False, key_padding_mask=padding.bool()
    )
    check_all(outs, expected, bound(q, k, v, weights))


# --- Cohere2: rotary on the sliding layers only ---------------------------------------------


def _cohere2_config():
    config = Cohere2Config(**TINY, num_hidden_layers=4, sliding_window=5)
    config._attn_implementation = "eager"
    return config


def test_cohere2_rotary_on_sliding_layers_only():
    """Cohere2 sets ``sliding_window`` on exactly its ``sliding_attention`` layers and rotates
    q and k there only: every layer's eager attention (its own masks, its interleaved RoPE)
    equals posenc's rope with ``window=`` on the sliding layers and no encoding, full causal,
    on the others."""
    config = _cohere2_config()
    assert config.layer_types == ["sliding_attention"] * 3 + ["full_attention"]
    rotary = Cohere2RotaryEmbedding(config)
    x = torch.randn(BATCH, 37, HIDDEN)
    cos, sin = rotary(x, torch.arange(37)[None])
    rope = rope_from_hf_config(config)
    q_pos, k_pos = default_positions(37, 37)
    for i, layer_type in enumerate(config.layer_types):
        attn = Cohere2Attention(config, layer_idx=i).eval()
        sliding = layer_type == "sliding_attention"
        assert attn.sliding_window == (config.sliding_window if sliding else None)
        make = create_sliding_window_causal_mask if sliding else create_causal_mask
        mask = make(config=config, inputs_embeds=x, attention_mask=None, cache=None)
        with torch.no_grad():
            expected, _ = attn(x, (cos, sin), mask)
            q = split_heads(attn.q_proj(x), HEADS)
            k = split_heads(attn.k_proj(x), KV_HEADS)
            v = split_heads(attn.v_proj(x), KV_HEADS)
            enc, window = (rope, config.sliding_window) if sliding else (None, None)
            got = attn.o_proj(merge_heads(posenc.attention(q, k, v, enc, window=window)))
            other = attn.o_proj(merge_heads(posenc.attention(q, k, v, None if sliding else rope)))
            allowed = k_pos <= q_pos[:, None]
            if sliding:
                allowed = allowed & (k_pos > q_pos[:, None] - window)
            rq, rk = rope(q, k) if sliding else (q, k)
            _, weights = reference(rq, rk, v, allowed)
        angle = 36 if sliding else None  # both sides rotate in float32 (first frequency 1 rad)
        rounding = bound(rq, rk, v, weights, angle=angle, sides=2, out_proj=attn.o_proj.weight)
        assert_close(got, expected, **rounding, msg=f"layer {i} ({layer_type})")
        # rotating on the other kind of layer would be wrong by far more
        assert (other - expected).abs().max() > 100 * rounding["atol"], f"layer {i}"


def _check_cohere2_plan(plan, config):
    """One spec per layer: rotary with the config's window on the sliding layers, no
    encoding and no window on the full ones."""
    from posenc.models.spec import encoding_kind

    assert len(plan) == config.num_hidden_layers
    for i, (layer, layer_type) in enumerate(zip(plan, config.layer_types, strict=True)):
        sliding = layer_type == "sliding_attention"
        assert layer.window == (config.sliding_window if sliding else None), f"layer {i}"
        assert layer.chunk is None, f"layer {i}"
        kind = encoding_kind(layer.encoding)
        assert kind == ("rotary" if sliding else "none"), f"layer {i} ({layer_type}): {kind}"


@pytest.mark.parametrize("n_layers", [4, 10])
def test_cohere2_local_global_plan(n_layers):
    """posenc's Cohere2 recipe, ``LayerPlan.local_global(n, ratio=4, window=W,
    global_="nope")``, puts its windows and rotary on exactly the layers transformers'
    Cohere2Config makes sliding (its default ``sliding_window_pattern`` of 4)."""
    from posenc.models import plan

    config = Cohere2Config(**{**TINY, "num_hidden_layers": n_layers}, sliding_window=5)
    recipe = plan.LayerPlan.local_global(n_layers, ratio=4, window=5, global_="nope")
    _check_cohere2_plan(recipe, config)


def test_cohere2_layer_plan_from_hf_config():
    """posenc's layer plan read off a Cohere2 config: a window and rotary on its sliding
    layers, neither on its full ones."""
    from posenc.hf import layer_plan

    config = _cohere2_config()
    _check_cohere2_plan(layer_plan(config), config)


def test_window_conventions_of_the_models():
    """The window each model means, from its own mask functions (see the module docstring),
    is posenc's pattern: Mistral's ``sliding_window=W`` the last ``W`` keys (``window=W``),
    ModernBERT's ``local_attention=W`` ``|i - j| <= W // 2`` (``window=W, causal=False``),
    an odd ``W`` rounding down."""
    from posenc.attn.masks import AttnPattern

    q_pos, k_pos = torch.arange(37)[:, None], torch.arange(37)[None, :]
    for window in (1, 4, 5):
        hf = sliding_window_causal_mask_function(window)(0, 0, q_pos, k_pos)
        assert torch.equal(AttnPattern(window=window).visible(q_pos, k_pos, causal=True), hf)
    for local_attention in (4, 5):
        config = ModernBertConfig(
            local_attention=local_attention,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
            cls_token_id=None,
            sep_token_id=None,
        )
        hf = sliding_window_bidirectional_mask_function(config.sliding_window)(0, 0, q_pos, k_pos)
        got = AttnPattern(window=local_attention).visible(q_pos, k_pos, causal=False)
        assert torch.equal(got, hf)
