"""Valid calls of posenc's models callables (see tests/contract/registry.py).

The models are tiny (a vocabulary of 16, width 8, one or two layers, two heads of 4) and
their inputs four tokens long: each probe builds its call again.
"""

from __future__ import annotations

import torch
from tests.contract.registry import EXEMPT, call, example

from posenc import models
from posenc.attn.temperature import QueryTemperature
from posenc.models import LayerPlan, LayerSpec, TransformerLM

__all__: list[str] = []

V, D, H, S = 16, 8, 2, 4
IDS = torch.tensor([[1, 2, 3, 4]])  # [batch=1, seq=4]
P = torch.tensor([0, 1, 2, 3])


def lm(encoding: str = "rope", n_layers: int = 1) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(V, D, n_layers, H, encoding=encoding).eval()


# the layers' own forward and its parts take the AttentionContext the model built and
# checked for this forward (its positions and masks), and the layer's encoding and tables
HOOK = (
    "a hook TransformerLM.forward calls with the AttentionContext, rotation and cache it "
    "built and checked for this forward; users call the model (to become private)"
)
for hook in (
    "posenc.models.Block.forward",
    "posenc.models.SelfAttention.forward",
    "posenc.models.SelfAttention.clock",
    "posenc.models.SelfAttention.project",
    "posenc.models.SelfAttention.temper",
):
    EXEMPT[hook] = HOOK

# the model
example(
    "posenc.models.TransformerLM",
    lambda: call(
        TransformerLM,
        V,
        D,
        1,
        H,
        "rope",
        n_kv_heads=1,
        mlp_ratio=2,
        causal=True,
        tie_embeddings=False,
        scale=0.5,
    ),
)
example(
    "posenc.models.TransformerLM.check_positions",
    lambda: call(lm().check_positions, P, seq_len=S, batch=1),
)
example(
    "posenc.models.TransformerLM.new_cache",
    lambda: call(lm().new_cache, 1, 8, rolling=True, static=False),
)


def _forward() -> tuple:
    model = lm("alibi", 2)
    mask, segments = torch.ones(1, S, dtype=torch.long), torch.tensor([[0, 0, 1, 1]])
    cache = model.new_cache(1, 8)
    return call(model.forward, IDS, P, cache, attention_mask=mask, segment_ids=segments)


example("posenc.models.TransformerLM.forward", _forward)
example(
    "posenc.models.TransformerLM.generate",
    lambda: call(
        lm().generate,
        IDS,
        2,
        temperature=0.5,
        top_k=3,
        use_cache=True,
        generator=torch.Generator().manual_seed(0),
        attention_mask=torch.tensor([[0, 1, 1, 1]]),
        positions=torch.tensor([[0, 0, 1, 2]]),
        compile=False,
    ),
)
example(
    "posenc.models.attention_maps",
    lambda: call(models.attention_maps, lm(), IDS, P),
)


def _decode_step() -> tuple:
    model = lm()
    cache = model.new_cache(1, 8, static=True)
    model(IDS, cache=cache)  # the prompt
    return call(models.DecodeStep(model, cache).forward, torch.tensor([[5]]), torch.tensor([4]))


example(
    "posenc.models.DecodeStep",
    lambda: (lambda m: call(models.DecodeStep, m, m.new_cache(1, 8, static=True)))(lm()),
)
example("posenc.models.DecodeStep.forward", _decode_step)

# the layers, built alone
example(
    "posenc.models.Block",
    lambda: call(models.Block, D, H, 1, 2, LayerSpec("rope", window=2), scale=0.5),
)
example(
    "posenc.models.SelfAttention",
    lambda: call(models.SelfAttention, D, H, 1, LayerSpec("rope", sinks=True), scale=0.5),
)

# plans
example(
    "posenc.models.LayerSpec",
    lambda: call(
        LayerSpec,
        "rope",
        window=3,
        chunk=None,
        sinks=True,
        softcap=30.0,
        temperature=QueryTemperature(),
    ),
)
example(
    "posenc.models.LayerPlan",
    lambda: call(LayerPlan, [LayerSpec("rope"), LayerSpec(None)], input="sinusoidal"),
)
# an encoding of None is a layer without one (NoPE), as LayerSpec documents
NOPE = ("none",)
example(
    "posenc.models.LayerPlan.uniform",
    lambda: call(LayerPlan.uniform, 2, "rope", window=4),
    ok={"encoding": NOPE},
)
example(
    "posenc.models.LayerPlan.nope_every",
    lambda: call(LayerPlan.nope_every, 4, 2, "rope", chunk=8, window=None, temperature=True),
    ok={"encoding": NOPE},
)
example(
    "posenc.models.LayerPlan.local_global",
    lambda: call(
        LayerPlan.local_global,
        4,
        (3, 1),
        window=8,
        local="rope",
        global_="alibi",
        sinks=True,
        softcap=50.0,
    ),
    ok={"local": NOPE, "global_": NOPE},
)
example(
    "posenc.models.LayerPlan.alternate",
    lambda: call(LayerPlan.alternate, 2, 4, "rope", sinks=True),
    ok={"encoding": NOPE},
)
example(
    "posenc.models.LayerPlan.lines",
    lambda: call(LayerPlan.uniform(2, "rope").lines, width=60),
)

# decoding
example("posenc.models.check_temperature", lambda: call(models.check_temperature, 0.7))
example(
    "posenc.models.next_positions",
    lambda: call(models.next_positions, torch.tensor([[0, 1, 2], [3, 1, 0]])),
)
example(
    "posenc.models.sample",
    lambda: call(
        models.sample,
        torch.tensor([[0.1, 2.0, -1.0, 0.5], [1.0, 0.0, 3.0, 0.2]]),
        temperature=0.8,
        top_k=2,
        generator=torch.Generator().manual_seed(0),
    ),
)
