"""Valid calls of the public methods of posenc's encoding classes (see
tests/contract/registry.py); RoPE's family (``posenc.rotary.rope``, ``xpos``, ``video``,
``dca``) lives in :mod:`tests.contract.examples_rope`."""

from __future__ import annotations

import functools

import torch
from tests.contract.registry import EXEMPT, B, D, H, P, S, call, example, gen, heads

import posenc


@functools.cache
def enc(name: str, **config):
    key = posenc.registry.get(name).size_key
    size = {} if key is None else {key: {"head_dim": D, "n_heads": H, "dim": D}[key]}
    return posenc.create(name, **size, **config)


GRID = torch.stack((P // 2, P % 2), dim=-1)  # [seq, 2] (row, column) of a 2 x 2 grid
MROPE = torch.stack((P, P, P))[:, None]  # [3, 1, seq]: temporal, height and width ids

# the hooks posenc.attention and bias() call with inputs they built and checked; a check
# there would run inside every flex score and every block of rows
HOOK = (
    "a hook posenc calls with tensors it built and checked (inside flex scores and "
    "blocks of rows); users call bias(), score_mod() or posenc.attention"
)
for hook in (
    "posenc.bias.alibi.ALiBi.bias_at",
    "posenc.bias.alibi.ALiBi.head_slopes",
    "posenc.bias.cope.CoPE.score_bias",
    "posenc.bias.stick_breaking.StickBreaking.score_weights",
    "posenc.bias.fire.Fire.bias_at",
    "posenc.bias.fire.Fire.masked_bias",
    "posenc.bias.fire.Fire.block_rows",
    "posenc.bias.fire.Fire.threshold",
    "posenc.bias.kerple.Kerple.bias_at",
    "posenc.bias.kerple.Kerple.kernel_parameters",
    "posenc.bias.shaw.Shaw.value_term",
    "posenc.bias.t5.T5Bias.bias_at",
):
    EXEMPT[hook] = HOOK
for protocol in (
    "posenc.base.capabilities.LinearSlopes.linear_slopes",
    "posenc.base.capabilities.ScoreBias.score_bias",
    "posenc.base.capabilities.ScoreWeights.score_weights",
    "posenc.base.capabilities.InputBias.clock",
    "posenc.base.capabilities.InputTransforms.transforms",
    "posenc.base.capabilities.RelativeTables.value_term",
):
    EXEMPT[protocol] = "a capability protocol's abstract method: each encoding's own is probed"
# raise TypeError whatever they get: their bias needs the layer's input or scores
EXEMPT["posenc.bias.cope.CoPE.bias_at"] = "always a TypeError naming what to call instead"
EXEMPT["posenc.bias.cope.CoPE.score_mod"] = "always a TypeError: no score_mod computes CoPE"
EXEMPT["posenc.bias.fox.Fox.bias_at"] = "always a TypeError naming what to call instead"
EXEMPT["posenc.bias.fox.Fox.score_mod"] = "always a TypeError: FoX runs as key coordinates"
EXEMPT["posenc.bias.shaw.Shaw.bias_at"] = "always a TypeError naming what to call instead"
for method in ("bias", "bias_at", "score_mod"):  # no bias: weights() is its observable
    EXEMPT[f"posenc.bias.stick_breaking.StickBreaking.{method}"] = (
        "always a TypeError: stick-breaking's weights replace the softmax; call weights()"
    )
EXEMPT["posenc.bias.path.Path.bias_at"] = "always a TypeError naming what to call instead"
EXEMPT["posenc.bias.path.Path.score_mod"] = "always a TypeError: no score_mod computes PaTH"

# bias encodings: their own bias() and score_mod() at explicit positions (the base
# classes' methods are in tests.contract.examples_core)
example(
    "posenc.bias.alibi.ALiBi.slopes",
    lambda: call(enc("alibi").slopes, device="cpu", dtype=torch.float32),
)
example(
    "posenc.bias.cope.CoPE.bias",
    lambda: call(enc("cope", head_dim=D).bias, P, P, q=heads(1), k=heads(2), scale=0.5),
)
example("posenc.bias.fire.Fire.bias", lambda: call(enc("fire").bias, P, P, q=None, scale=0.5))
example(
    "posenc.bias.stick_breaking.StickBreaking.weights",
    lambda: call(enc("stick_breaking").weights, P, P, q=heads(1), k=heads(2), scale=0.5),
)
example("posenc.bias.alibi.ALiBi.linear_slopes", lambda: call(enc("alibi").linear_slopes, True))
example("posenc.bias.fox.Fox.clock", lambda: call(enc("fox", dim=D).clock, gen(B, S, D)))
example("posenc.bias.fox.Fox.log_gates", lambda: call(enc("fox", dim=D).log_gates, gen(B, S, D)))
example(
    "posenc.bias.fox.Fox.bias",
    lambda: call(enc("fox", dim=D).bias, P, P, scale=0.5, x=gen(B, S, D)),
)
example(
    "posenc.bias.path.Path.transforms",
    lambda: call(enc("path", dim=D, head_dim=D).transforms, gen(B, S, D)),
)
example(
    "posenc.bias.path.Path.bias",
    lambda: call(
        enc("path", dim=D, head_dim=D).bias, P, P, q=heads(1), k=heads(2), scale=0.5, x=gen(B, S, D)
    ),
)
example(
    "posenc.bias.shaw.Shaw.bias",
    lambda: call(enc("shaw", head_dim=D).bias, P, P, q=heads(1), scale=0.5),
)
example(
    "posenc.bias.shaw.Shaw.score_mod",
    lambda: call(enc("shaw", head_dim=D).score_mod, P, P, q=heads(1), q_offset=0, scale=0.5),
)

# additive encodings
example(
    "posenc.additive.learned.Learned.resize",
    lambda: call(posenc.create("learned", dim=D, max_positions=4).resize, 8, mode="interpolate"),
)
example(
    "posenc.additive.grid.LearnedGrid.resample",
    lambda: call(posenc.create("learned_2d", dim=D, grid=(2, 2)).resample, (3, 3), mode="bicubic"),
)
example(
    "posenc.additive.grid.LearnedGrid.check_positions",
    lambda: call(enc("learned_2d", grid=(2, 2)).check_positions, GRID, seq_len=S),
)
example(
    "posenc.additive.grid.LearnedGrid.default_positions",
    lambda: call(enc("learned_2d", grid=(2, 2)).default_positions, S, offset=0),
)

# rotary encodings other than RoPE's family
for name, positions, extra in (
    ("fope", P, {}),
    ("pope", P, {"n_heads": H}),
    ("rope_2d", GRID, {}),
    ("rope_mixed", GRID, {"n_heads": H}),
    ("mrope", MROPE, {}),
):
    cls = posenc.registry.get(name)
    prefix = f"{cls.__module__}.{cls.__qualname__}"
    make = functools.partial(enc, name, **extra)
    example(
        f"{prefix}.rotation",
        functools.partial(lambda make, p: call(make().rotation, p, seq_len=S), make, positions),
    )
    if "rotate" in vars(cls):
        example(
            f"{prefix}.rotate",
            functools.partial(
                lambda make, p: call(make().rotate, heads(), make().rotation(p), key=False),
                make,
                positions,
            ),
        )
    if "inv_freq" in vars(cls):
        example(f"{prefix}.inv_freq", functools.partial(lambda make: call(make().inv_freq), make))
example(
    "posenc.rotary.mrope.MRoPE.check_positions",
    lambda: call(enc("mrope").check_positions, MROPE, seq_len=S, batch=1),
)
example(
    "posenc.rotary.mrope.MRoPE.causal_positions",
    lambda: call(enc("mrope").causal_positions, P.expand(B, -1)),  # text: they order tokens
)
