import math
import os

import pytest
import torch
from hypothesis import settings

# Property tests: deterministic in CI, a few more examples locally.
settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

torch.set_num_threads(1)  # two xdist workers on two cores


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _sharpen(model, std=0.5):
    """Large q/k/v weights make attention sharp, so that positions show in the logits (near
    uniform attention at initialisation would hide a wrong rotation or bias)."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.normal_(std=std)
    return model


def _check_cached_decoding(model, prompt, new_tokens, rtol=1e-5, atol=1e-5):
    """Greedy generation with the KV cache equals recomputation token for token, and a
    prefill of ``prompt`` then one-token steps give the logits of one full forward.

    Returns ``(tokens, full_logits)`` for further checks.
    """
    cached = model.generate(prompt, new_tokens, use_cache=True)
    assert torch.equal(cached, model.generate(prompt, new_tokens, use_cache=False))
    batch, start = prompt.shape
    total = start + new_tokens
    with torch.no_grad():
        full = model(cached)
        cache = model.new_cache(batch, total)
        steps = [model(cached[:, :start], cache=cache)]
        steps += [model(cached[:, i : i + 1], cache=cache) for i in range(start, total)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=rtol, atol=atol)
    return cached, full


@pytest.fixture
def sharpen():
    return _sharpen


@pytest.fixture
def check_cached_decoding():
    return _check_cached_decoding


def _dense_attention(q, k, v, bias=None, allowed=None, causal=False):
    """softmax(q kᵀ / sqrt(d) + bias) v, computed densely in float64 with the key/value heads
    repeated; ``allowed`` masks scores, ``causal`` puts the queries at the end of the keys."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    if causal:
        q_len, k_len = q.shape[2], k.shape[2]
        allowed = torch.ones(k_len, k_len, dtype=torch.bool).tril()[k_len - q_len :]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.fixture
def dense_attention():
    return _dense_attention
