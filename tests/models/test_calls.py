"""posenc.models.calls: a block's torch layers run as their functional ops only where the
module call would add nothing (no hook, torch's own class), with bit-equal results."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc.models import TransformerLM
from posenc.models.calls import call, forward_of, layers_of, linear, mlp, norm, plain


def test_the_functional_ops_equal_the_module_calls_bit_for_bit():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16)
    rms, lin = nn.RMSNorm(16), nn.Linear(16, 8)
    seq = nn.Sequential(nn.Linear(16, 32, bias=False), nn.GELU("tanh"), nn.Linear(32, 16))
    assert torch.equal(norm(rms, x), rms(x))
    assert torch.equal(linear(lin, x), lin(x))
    assert torch.equal(mlp(seq, x), seq(x))


def test_a_layer_with_a_hook_is_called_as_a_module():
    layer = nn.Linear(4, 4)
    assert plain(layer)
    seen = []
    handle = layer.register_forward_hook(lambda module, args, out: seen.append(out))
    assert not plain(layer)
    out = linear(layer, torch.randn(1, 4))
    assert len(seen) == 1 and seen[0] is out
    handle.remove()
    assert plain(layer)


def test_a_global_hook_makes_every_layer_a_module_call():
    layer = nn.RMSNorm(4)
    seen = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: seen.append(m))
    try:
        assert not plain(layer)
        norm(layer, torch.randn(1, 4))
    finally:
        handle.remove()
    assert seen == [layer] and plain(layer)


def test_a_replaced_layer_runs_its_own_forward():
    class Doubled(nn.Linear):  # a LoRA-like wrapper: another class, its own forward
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    layer = Doubled(4, 4)
    x = torch.randn(1, 4)
    assert torch.equal(linear(layer, x), 2 * nn.functional.linear(x, layer.weight, layer.bias))
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), Doubled(8, 4))
    assert torch.equal(mlp(seq, x), seq(x))


def test_call_runs_forward_or_the_module_with_its_hooks():
    seen = []
    model = TransformerLM(32, 16, 2, 4, "rope", n_kv_heads=2).eval()
    model.blocks[1].attn.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs["layer"]), with_kwargs=True
    )
    model(torch.zeros(1, 3, dtype=torch.long))
    assert seen == [1]  # the hooked layer was called as a module, with its keywords
    assert call(nn.Identity(), 5) == 5


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_a_hook_on_the_final_norm_sees_the_hidden_states(name):
    model = TransformerLM(32, 16, 2, 4, name).eval()
    got = {}
    model.norm.register_forward_hook(lambda m, args, out: got.setdefault("h", out))
    logits = model(torch.zeros(1, 3, dtype=torch.long))
    assert torch.equal(logits, nn.functional.linear(got["h"], model.head.weight))


def test_a_layer_compiled_on_its_own_runs_its_compiled_call():
    """``block.compile()`` sets the call a module call runs: the model goes through it."""
    model = TransformerLM(32, 16, 2, 4, "rope").eval()
    block = model.blocks[0]
    assert plain(block)
    ran = []
    block._compiled_call_impl = lambda *args, **kwargs: (
        ran.append(1) or block.forward(*args, **kwargs)
    )
    assert not plain(block)
    model(torch.zeros(1, 3, dtype=torch.long))
    assert ran == [1]


def test_a_layer_assigned_after_construction_is_the_one_that_runs():
    """The model reads its layers from ``_modules`` (``layers_of``): a layer replaced by
    assignment (a LoRA wrapper, a spy) is the one a forward calls."""
    torch.manual_seed(0)
    model = TransformerLM(32, 16, 2, 4, "rope").eval()
    ids = torch.zeros(1, 3, dtype=torch.long)
    before = model(ids)
    seen = []

    class Spy(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(tuple(x.shape))
            return super().forward(x)

    attn = model.blocks[1].attn
    spy = Spy(attn.qkv.in_features, attn.qkv.out_features, bias=False)
    spy.load_state_dict(attn.qkv.state_dict())
    attn.qkv = spy
    model.blocks[0].mlp = nn.Sequential(*model.blocks[0].mlp, nn.Identity())  # not 3 layers
    assert layers_of(attn)["qkv"] is spy
    assert torch.equal(model(ids), before) and seen == [(1, 3, 16)]


def test_forward_of_is_the_forward_or_the_module_itself():
    layer = nn.Linear(2, 2)
    assert forward_of(layer) == layer.forward
    handle = layer.register_forward_pre_hook(lambda m, args: None)
    assert forward_of(layer) is layer
    handle.remove()
    assert forward_of(layer) == layer.forward
