"""Valid calls of posenc's core callables (see tests/contract/registry.py)."""

from __future__ import annotations

import torch
from tests.contract.registry import CPU, EXEMPT, LABEL, B, D, H, P, S, call, example, gen, heads

import posenc

__all__: list[str] = []


def summed() -> posenc.Compose:
    return posenc.compose("sinusoidal", {"name": "learned", "max_positions": 8}, dim=D)


EXEMPT["posenc.EncodingInfo"] = (
    "a frozen record of what posenc.registry.register was told; it holds what it is given"
)
EXEMPT["posenc.PositionOutOfRangeError"] = (
    "the error posenc raises with the position and limit it checked; an error's constructor "
    "does not refuse its own message's parts"
)
EXEMPT["posenc.BiasEncoding.forward"] = (
    "always a TypeError naming what to call instead (a bias runs inside attention)"
)
for abstract in ("posenc.RotaryEncoding.rotation", "posenc.RotaryEncoding.rotate"):
    EXEMPT[abstract] = "abstract: each rotary encoding's own is probed"

# the base classes, built as the kinds' classes build them (their own keys: posenc.create)
for cls in ("Encoding", "AdditiveEncoding", "BiasEncoding", "RotaryEncoding", "NoEncoding"):
    example(
        f"posenc.{cls}",
        lambda cls=cls: call(getattr(posenc, cls), device="cpu", dtype=torch.float32),
    )
example(
    "posenc.Compose",
    lambda: call(
        posenc.Compose,
        posenc.create("sinusoidal", dim=D),
        posenc.create("learned", dim=D, max_positions=8),
    ),
)

# what every encoding shares: its positions' checks and defaults
example(
    "posenc.Encoding.check_positions",
    lambda: call(
        posenc.create("sinusoidal", dim=D).check_positions,
        P,
        seq_len=S,
        batch=1,
        name="positions",
        device=CPU,
    ),
    ok={"name": LABEL},
)
example(
    "posenc.Encoding.default_positions",
    lambda: call(
        posenc.create("learned", dim=D, max_positions=8).default_positions,
        S,
        device="cpu",
        offset=2,
    ),
)
example(
    "posenc.Compose.check_positions",
    lambda: call(summed().check_positions, P, seq_len=S, batch=1, name="positions", device=CPU),
    ok={"name": LABEL},
)
example(
    "posenc.Compose.default_positions",
    lambda: call(summed().default_positions, S, device="cpu", offset=2),
)

# what the additive, bias and none kinds share
example(
    "posenc.AdditiveEncoding.encode",
    lambda: call(posenc.create("sinusoidal", dim=D).encode, P, dtype=torch.float32),
)
example(
    "posenc.AdditiveEncoding.forward",
    lambda: call(posenc.create("sinusoidal", dim=D), gen(B, S, D), P),
)
example("posenc.NoEncoding.forward", lambda: call(posenc.create("nope"), gen(B, S, D), P))
example(
    "posenc.BiasEncoding.bias",
    lambda: call(posenc.create("alibi", n_heads=H).bias, P, P, q=heads(1), scale=0.5),
)
example(
    "posenc.BiasEncoding.score_mod",
    lambda: call(posenc.create("t5", n_heads=H).score_mod, P, P, q=heads(1), q_offset=0, scale=0.5),
)
example(
    "posenc.BiasEncoding.derived",
    lambda: call(posenc.create("alibi", n_heads=H).derived, "slopes", lambda: 1.0, host=True),
    ok={"key": ("none", "int", "choice")},  # any hashable value names what is kept
)
# hooks posenc calls with the positions bias() and attention checked, inside every block of
# rows and every flex score (users call bias(), score_mod() or posenc.attention)
for hook in (
    "posenc.BiasEncoding.bias_at",
    "posenc.BiasEncoding.masked_bias",
    "posenc.BiasEncoding.block_rows",
):
    EXEMPT[hook] = "a hook posenc calls with tensors it built and checked (blocks of rows, flex)"

EXEMPT["posenc.BiasEncoding.distance_values"] = (
    "a hook the distance runner calls with the lengths, device and dtype of a checked call"
)

# what the rotary kind shares (RoPE's forward; FoPE's rotate_pair is the base one)
example(
    "posenc.RotaryEncoding.forward",
    lambda: call(
        posenc.create("rope", head_dim=D), heads(1), heads(2), P, k_positions=P, seq_len=S
    ),
)
example(
    "posenc.RotaryEncoding.rotate_pair",
    lambda: call(
        posenc.create("fope", head_dim=D).rotate_pair,
        heads(1),
        heads(2),
        posenc.create("fope", head_dim=D).rotation(P),
    ),
)
example(  # a length-dependent RoPE: its total_len counts, no table serves
    "posenc.RotaryEncoding.default_rotation",
    lambda: call(
        posenc.create(
            "rope",
            head_dim=D,
            scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4},
        ).default_rotation,
        S,
        "cpu",
        offset=2,
        total_len=8,
    ),
)
example(
    "posenc.RotaryEncoding.causal_positions",
    lambda: call(posenc.create("rope", head_dim=D).causal_positions, P),
)

# the registry and the builders
example("posenc.create", lambda: call(posenc.create, "sinusoidal", dim=D))
example("posenc.info", lambda: call(posenc.info, "alibi"))
example(
    "posenc.build",
    lambda: call(posenc.build, "rope", dim=4 * D, head_dim=D, n_heads=4),
    alias={"spec": ("encoding",)},  # the spec names an encoding: "unknown encoding ..."
)
example("posenc.compose", lambda: call(posenc.compose, "sinusoidal", "learned", dim=D))


example("posenc.set_validation", lambda: call(posenc.set_validation, True))
# the call checks its argument (not the ``with`` entering the block it returns)
example("posenc.validation", lambda: call(posenc.validation, False))


def _attention() -> tuple:
    alibi = posenc.create("alibi", n_heads=H)
    return call(
        posenc.attention,
        heads(1),
        heads(2),
        heads(3),
        alibi,
        q_positions=P,
        k_positions=P,
        causal=True,
        scale=0.5,
        backend="math",
        key_padding_mask=torch.tensor([[True] * S, [False] + [True] * (S - 1)]),
        segment_ids=torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1]]),
        bias=alibi.bias(P, P),
        window=3,
        sinks=torch.zeros(H),
        softcap=30.0,
    )


example("posenc.attention", _attention)


# KV caches: a two-layer cache (every key in layer 0, the last 2 in layer 1) holding three
# tokens, rebuilt for each probe; StaticKVCache's own methods beside KVCache's
CACHE_SIZES = (2, 1, 1, 4, 8)  # n_layers, batch, kv_heads, head_dim, max_seq_len
KEEP = (None, 2)


def cache(static: bool = False) -> posenc.KVCache:
    """A cache holding three tokens at positions 0, 1, 2."""
    made = (posenc.StaticKVCache if static else posenc.KVCache)(*CACHE_SIZES, keep=list(KEEP))
    made.update_positions(torch.arange(3))
    if isinstance(made, posenc.StaticKVCache):
        made.ring_keys(torch.arange(3).view(1, 3), torch.ones(1, 3, dtype=torch.bool))
    for layer in range(2):
        made.update(layer, gen(1, 1, 3, 4, seed=layer), gen(1, 1, 3, 4, seed=layer + 2))
    made.advance(3)
    return made


def new(n: int = 1, seed: int = 5) -> torch.Tensor:
    return gen(1, 1, n, 4, seed=seed)  # [batch, kv_heads, n, head_dim]


for cache_cls in (posenc.KVCache, posenc.StaticKVCache):
    example(
        f"posenc.{cache_cls.__name__}",
        lambda cls=cache_cls: call(
            cls, *CACHE_SIZES, device="cpu", dtype=torch.float32, keep=list(KEEP), key_dims=[4, 4]
        ),
    )
example(
    "posenc.KVCache.check_fits",
    lambda: call(
        cache().check_fits,
        kv_heads=1,
        head_dim=4,
        key_dims=[4, 4],
        keep=list(KEEP),
        dtype=torch.float32,
        device=CPU,
    ),
)
example("posenc.KVCache.check_batch", lambda: call(cache().check_batch, 1))
example("posenc.KVCache.visible", lambda: call(cache().visible, 1, 2))
example("posenc.StaticKVCache.visible", lambda: call(cache(True).visible, 1, 2))
example("posenc.KVCache.update", lambda: call(cache().update, 0, new(), new(seed=6)))
# keys and values side by side: [batch, 2 * kv_heads, n, head_dim]
example("posenc.KVCache.update_joint", lambda: call(cache().update_joint, 0, gen(1, 2, 1, 4)))
example("posenc.KVCache.last_clock", lambda: call(cache().last_clock, 0))
example("posenc.StaticKVCache.last_clock", lambda: call(cache(True).last_clock, 0))
example("posenc.KVCache.add_clock", lambda: call(cache().add_clock, 0, 2))
example("posenc.StaticKVCache.add_clock", lambda: call(cache(True).add_clock, 0, 2))
example("posenc.KVCache.update_clock", lambda: call(cache().update_clock, 0, gen(1, 2, 1)))
for name, static in (("KVCache", False), ("StaticKVCache", True)):
    example(
        f"posenc.{name}.update_positions",
        lambda s=static: call(
            cache(s).update_positions,
            torch.tensor([3]),
            torch.ones(1, 8 if s else 4, dtype=torch.bool),
            None if s else torch.tensor([[0, 0, 1, 1]]),  # a static cache takes no documents
            explicit=True,
            given=True,
        ),
    )
    example(f"posenc.{name}.count_positions", lambda s=static: call(cache(s).count_positions, 2))
    example(f"posenc.{name}.next_positions", lambda s=static: call(cache(s).next_positions, 2))
    example(f"posenc.{name}.advance", lambda s=static: call(cache(s).advance, 0))
    example(f"posenc.{name}.stored_keys", lambda s=static: call(cache(s).stored_keys, 1))
example("posenc.KVCache.shift_positions", lambda: call(cache().shift_positions, 2))
example(
    "posenc.KVCache.rerotate",
    lambda: call(
        cache().rerotate,
        posenc.create("rope", head_dim=4),
        delta=torch.tensor([2]),
        to=posenc.create("rope", head_dim=4, base=500.0),
        layers=[1, 0],
        seq_len=8,
        new_seq_len=8,
    ),
)
example("posenc.StaticKVCache.slots", lambda: call(cache(True).slots, 2))
example("posenc.StaticKVCache.written", lambda: call(cache(True).written, 2))
example("posenc.StaticKVCache.check_room", lambda: call(cache(True).check_room, 2))
example(
    "posenc.StaticKVCache.ring_keys",
    lambda: call(cache(True).ring_keys, torch.tensor([[3]]), torch.tensor([[True]])),
)
EXEMPT["posenc.StaticKVCache.update_rotated"] = (
    "SelfAttention.forward's fused write of a kernel='triton' RoPE layer, with the rotation "
    "it computed; its layer, k and v are update's checks (probed there), q and the rotation "
    "rope_cache_write's; a Triton launch (no CPU example without TRITON_INTERPRET)"
)
