"""attention_maps: the probabilities it reads out are those each layer used, checked by
rebuilding every layer's output from them (maps @ v through the output projection)."""

import pytest
import torch

from posenc.base import RelativeTables
from posenc.models import TransformerLM, attention_maps
from posenc.positions import causal_mask

#: one encoding of each kind (additive, rotary, bias, none); Shaw adds to the values too
ENCODINGS = ["sinusoidal", "rope", "alibi", "t5", {"name": "shaw", "values": True}, "nope"]
EPS = torch.finfo(torch.float32).eps


def _layer_io(model, input_ids, positions=None):
    """Every SelfAttention's input x and output, captured by hooks on one forward."""
    seen = []

    def hook(module, args, kwargs, output):
        (x,) = args
        seen.append((module, (x, kwargs["encoding"], kwargs["rotation"]), output))

    handles = [block.attn.register_forward_hook(hook, with_kwargs=True) for block in model.blocks]
    with torch.no_grad():
        model(input_ids, positions)
    for h in handles:
        h.remove()
    return seen


def _qkv(attn, x, encoding, rotation):
    """The layer's own q, k, v (its ``project``), k and v with the key heads repeated: the
    rebuild below checks the maps against the layer's output, not this projection."""
    q, k, v = attn.project(x, encoding, rotation)
    group = attn.n_heads // attn.n_kv_heads
    return q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ENCODINGS, ids=lambda e: e if isinstance(e, str) else e["name"])
def test_maps_rebuild_each_layers_output(name, causal, sharpen, attention_tol):
    model = sharpen(
        TransformerLM(64, 32, 3, 4, encoding=name, n_kv_heads=2, causal=causal), std=0.3
    )
    ids = torch.randint(0, 64, (2, 9))
    maps = attention_maps(model, ids)
    assert maps.shape == (3, 2, 4, 9, 9) and maps.dtype == torch.float32
    torch.testing.assert_close(maps.sum(-1), torch.ones(3, 2, 4, 9))
    enc = model.encoding
    seen = _layer_io(model, ids)
    assert len(seen) == 3
    pos = torch.arange(9)
    for layer, (attn, args, real) in enumerate(seen):
        x, _, rotation = args[:3]
        with torch.no_grad():
            q, k, v = _qkv(attn, x, enc, rotation)
            p = maps[layer]
            out = p @ v  # [b, h, s, hd]
            bias, value_size, err = None, 0.0, 0.0
            if enc.kind == "bias":
                scale = attn.head_dim**-0.5
                bias = enc.bias(pos, pos, q=q, scale=scale)
                if (
                    isinstance(enc, RelativeTables) and enc.adds_to_values
                ):  # Shaw: q·a^K in the bias, a^V added to the values
                    out = out + enc.value_term(p, pos, pos)
                    value_size = enc.value_table.abs().max().item()
                    terms = scale * q.abs() @ enc.key_table.abs().T
                    err = (attn.head_dim + 1) * EPS * terms.max().item()
            rebuilt = attn.out(out.transpose(1, 2).reshape(2, 9, -1))
        rounding = attention_tol(
            q,
            k,
            v,
            bias=bias,
            causal=causal,
            out_proj=attn.out.weight,
            score_err=err,
            value_size=value_size,
        )
        torch.testing.assert_close(rebuilt, real, **rounding)
    if causal:
        upper = ~torch.ones(9, 9, dtype=torch.bool).tril()
        assert (maps[..., upper] == 0).all()
    else:
        assert (maps > 0).all()


def test_attention_is_sharp_enough_to_tell_maps_apart(sharpen):
    """The rebuild test would pass for uniform maps only if attention were uniform: here it
    is not (rows differ from 1/(i+1)), so a wrong map would show."""
    model = sharpen(TransformerLM(64, 32, 1, 4, encoding="rope"), std=0.5)
    maps = attention_maps(model, torch.randint(0, 64, (1, 9)))
    uniform = causal_mask(torch.arange(9), torch.arange(9)).float()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert (maps[0, 0] - uniform).abs().max() > 0.1


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_explicit_positions(name, sharpen, attention_tol):
    """Positions that restart (two packed documents): rotation, bias and the causal mask
    follow them."""
    model = sharpen(TransformerLM(64, 32, 2, 4, encoding=name), std=0.3)
    ids = torch.randint(0, 64, (1, 8))
    positions = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    maps = attention_maps(model, ids, positions)
    allowed = positions[None, :] <= positions[:, None]
    assert (maps[..., ~allowed] == 0).all()
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 1, 4, 8))
    seen = _layer_io(model, ids, positions)
    for layer, (attn, args, real) in enumerate(seen):
        x, enc, rotation = args[:3]
        with torch.no_grad():
            q, k, v = _qkv(attn, x, enc, rotation)
            bias = enc.bias(positions, positions) if enc.kind == "bias" else None
            rebuilt = attn.out((maps[layer] @ v).transpose(1, 2).reshape(1, 8, -1))
        rounding = attention_tol(q, k, v, bias=bias, allowed=allowed, out_proj=attn.out.weight)
        torch.testing.assert_close(rebuilt, real, **rounding)


def test_model_is_left_unchanged():
    model = TransformerLM(64, 32, 2, 4, encoding="alibi")
    ids = torch.randint(0, 64, (1, 6))
    with torch.no_grad():
        before = model(ids)
    attention_maps(model, ids)
    assert all(not block.attn._forward_pre_hooks for block in model.blocks)
    assert model.training
    with torch.no_grad():
        assert torch.equal(model(ids), before)


def test_bad_input():
    with pytest.raises(TypeError, match="model must be"):
        attention_maps(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))
    model = TransformerLM(64, 32, 1, 4, encoding="rope")
    with pytest.raises(ValueError):
        attention_maps(model, torch.full((1, 3), 64))
