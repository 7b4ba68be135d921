"""Case ``host``: the host time of one call, posenc against the peer doing the same work.

On a GPU a RoPE or an attention kernel takes microseconds, so the Python and dispatch
before it decide how long a call takes. This case measures that part on the CPU: tensors
so small that a call's time is its host work, one thread (``threads``, restored after),
posenc and its peer timed in the same process in interleaved rounds. Every row's floor is
the peer (``peer``): a ratio below 1 is posenc faster. The rows:

- ``enc(q, k)``: a RoPE module applied to q and k ``[1, heads, 1, head_dim]``, tables
  and all, against transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``
  (:func:`~posenc.bench.peers.transformers_rotary_call`);
- ``attention`` and ``attention, bias``: :func:`posenc.attention` of q, k, v
  ``[1, heads, length, head_dim]``, causal, with no encoding and with each bias encoding,
  against a bare causal ``scaled_dot_product_attention`` of the same tensors;
- ``forward, 1 token`` and ``decode step``: a :class:`~posenc.models.TransformerLM` of one
  token with no cache, and one decode step over its KV cache (after a prompt of
  ``prefix`` tokens; every implementation's cache grows alike, one token a round),
  against Hugging Face's ``LlamaForCausalLM`` of the same widths with its ``DynamicCache``
  (:func:`~posenc.bench.peers.hf_llama`);
- ``transformers forward, 1 token`` and ``transformers decode step``: that Llama with posenc
  inside (each of ``hf_patches``: ``posenc bench`` passes :func:`posenc.hf.apply` with exact
  rotary, and with ``attn_implementation="posenc"``) against the same Llama as
  transformers runs it.

A round of a RoPE or attention row makes ``calls`` calls of each implementation back to back
(``calls per round``; the times are per call): a call of microseconds timed right after
another implementation's pays for the caches that one left (a bare SDPA call of these
sizes took 7 µs in a loop and 9-13 µs after a posenc call, on the 2-core AMD EPYC), which
is the neighbour's cost, not its own. A model's call takes milliseconds: one per round.

Each row also times posenc inside ``posenc.validation(False)`` (``posenc, validation
off``): the part of a call its value checks cost. The targets (with validation on, the
default) are in :mod:`~posenc.bench.targets`; a missing peer is recorded as skipped and
its row has no ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from ..attn import attention
from ..builder import build
from ..host_reads import validation
from ..models import TransformerLM
from ..registry import create
from . import peers as peers_mod
from .bias_attention import bias_encodings
from .timing import interleaved_rows, row

__all__ = ["FLOOR", "OFF", "run"]

FLOOR = "peer"
OFF = "posenc, validation off"

Calls = dict[str, Callable[[], Any]]
Row = tuple[dict[str, Any], Calls, dict[str, str]]


def _unchecked(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` called with posenc's value checks off."""

    def call() -> Any:
        with validation(False):
            return fn()

    return call


def _with_peer(
    config: dict[str, Any],
    posenc_call: Callable[[], Any],
    adapter: Callable[..., Callable[[], Any]],
    peer_config: Mapping[str, Any],
    peers: bool,
    off: Callable[[], Any] | None = None,
    per_round: int = 1,
) -> Row:
    """A row: the peer (``adapter(**peer_config)``; the floor, when it builds and runs
    once), ``posenc_call`` and ``off`` (default: ``posenc_call`` with validation off), each
    called ``per_round`` times in a row per timed round."""
    calls: Calls = {}
    skipped: dict[str, str] = {}
    if peers:
        usable, skipped = peers_mod.resolve({FLOOR: adapter}, lambda fn: fn(), **peer_config)
        calls |= usable
    else:
        skipped[FLOOR] = "not run: peers off"
    calls |= {"posenc": posenc_call, OFF: off or _unchecked(posenc_call)}
    calls = {name: _repeated(fn, per_round) for name, fn in calls.items()}
    return {**config, "calls per round": per_round}, calls, skipped


def _repeated(fn: Callable[[], Any], n: int) -> Callable[[], Any]:
    """``fn`` called ``n`` times in a row (the last result returned)."""
    if n == 1:
        return fn

    def call() -> Any:
        for _ in range(n):
            out = fn()
        return out

    return call


def _per_call(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its times divided by its calls per round (its ratios unchanged)."""
    n = record["config"]["calls per round"]
    for result in record["results"].values():
        for key in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms"):
            result[key] /= n
    return record


def _rope_row(heads: int, head_dim: int, peers: bool, calls: int) -> Row:
    """``enc(q, k)`` for one token against transformers' rotation of it."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, heads, 1, head_dim, generator=gen) for _ in range(2))
    enc = create("rope", head_dim=head_dim)

    def peer_adapter(**config: Any) -> Callable[[], Any]:
        rotate = peers_mod.transformers_rotary_call(**config)
        return lambda: rotate(q, k)

    config = {
        "call": "enc(q, k)",
        "encoding": "rope",
        "shape": [1, heads, 1, head_dim],
        "peer call": "transformers LlamaRotaryEmbedding + apply_rotary_pos_emb",
    }
    peer_config = {"seq": 1, "head_dim": head_dim}
    return _with_peer(config, lambda: enc(q, k), peer_adapter, peer_config, peers, per_round=calls)


def _attention_rows(
    encodings: Sequence[str], heads: int, length: int, head_dim: int, calls: int
) -> list[Row]:
    """``posenc.attention`` with no encoding and with each of ``encodings``, each against a
    bare causal SDPA call of the same q, k, v (torch's own: it runs with ``peers`` off too)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_dim, generator=gen) for _ in range(3))
    shape = [1, heads, length, head_dim]

    def sdpa(**_: Any) -> Callable[[], Any]:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def posenc_call(name: str | None) -> Callable[[], Any]:
        if name is None:
            return lambda: attention(q, k, v)
        enc = build(name, n_heads=heads, head_dim=head_dim).eval()
        return lambda: attention(q, k, v, encoding=enc)

    rows = []
    for name in (None, *encodings):
        config = {
            "call": "attention" if name is None else "attention, bias",
            "encoding": name or "none",
            "shape": shape,
            "peer call": "scaled_dot_product_attention, causal",
        }
        rows.append(_with_peer(config, posenc_call(name), sdpa, {}, True, per_round=calls))
    return rows


def _forward(model: TransformerLM, ids: torch.Tensor) -> Callable[[], Any]:
    """A callable of ``model(ids)``, no cache."""
    return lambda: model(ids)


def _decoder(call: Callable[..., Any], prompt: torch.Tensor, **cache: Any) -> Callable[[], Any]:
    """A callable decoding one token per call with ``call(ids, **cache)``, after a prefill of
    ``prompt`` into the cache."""
    token = torch.zeros(1, 1, dtype=torch.long)
    call(prompt, **cache)

    def step() -> Any:
        return call(token, **cache)

    return step


def _model_rows(
    kinds: Sequence[str],
    vocab_size: int,
    dim: int,
    n_layers: int,
    n_heads: int,
    mlp_ratio: int,
    prefix: int,
    steps: int,
    peers: bool,
) -> list[Row]:
    """For each encoding of ``kinds``: a forward of one token and a cached decode step of a
    TransformerLM, against a Hugging Face Llama of the same widths (every call under
    ``no_grad``)."""
    sizes = {"vocab_size": vocab_size, "dim": dim, "n_layers": n_layers, "n_heads": n_heads}
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab_size, (1, prefix), generator=gen)
    token = torch.zeros(1, 1, dtype=torch.long)

    hf_step = partial(_peer_step, prompt)

    def step(model: TransformerLM, unchecked: bool) -> Callable[[], Any]:
        cache = model.new_cache(1, prefix + steps)
        call = _decoder(model, prompt, cache=cache)
        return _unchecked(call) if unchecked else call

    rows = []
    for kind in kinds:
        torch.manual_seed(0)
        model = TransformerLM(vocab_size, dim, n_layers, n_heads, kind, mlp_ratio=mlp_ratio).eval()
        config = {"encoding": kind, "shape": [1, 1], "model": f"dim {dim}, n_layers {n_layers}"}
        forward = {
            **config,
            "call": "forward, 1 token",
            "peer call": "transformers LlamaForCausalLM",
        }
        peer_sizes = {**sizes, "mlp_ratio": mlp_ratio}
        rows.append(_with_peer(forward, _forward(model, token), _peer_forward, peer_sizes, peers))
        decode = {
            **config,
            "call": "decode step",
            "peer call": "transformers LlamaForCausalLM, DynamicCache",
            "cached": prefix,
        }
        # a decode step holds its cache: posenc's two columns decode in caches of their own
        checked, unchecked = step(model, False), step(model, True)
        rows.append(_with_peer(decode, checked, hf_step, peer_sizes, peers, off=unchecked))
    return rows


def _patched_rows(
    patches: Mapping[str, Callable[[Any], Any]],
    sizes: Mapping[str, int],
    prefix: int,
    peers: bool,
) -> list[Row]:
    """For each of ``patches`` (label -> a function that patches a transformers model in
    place): a forward of one token and a decode step of the patched HF Llama against the
    same Llama unpatched (no rows without peers or transformers)."""
    if not peers or not patches:
        return []
    try:
        models = {label: peers_mod.hf_llama(**sizes) for label in patches}
    except ImportError:
        return []
    prompt = torch.randint(0, sizes["vocab_size"], (1, prefix), generator=torch.Generator())
    rows = []
    for label, patch in patches.items():
        built = models[label]
        patch(built[0])
        config = {"encoding": label, "shape": [1, 1], "model": f"dim {sizes['dim']}"}
        config |= {"peer call": "transformers LlamaForCausalLM"}
        forward = {**config, "call": "transformers forward, 1 token"}
        rows.append(_with_peer(forward, _hf_forward(built), _peer_forward, sizes, peers))
        decode = {**config, "call": "transformers decode step", "cached": prefix}
        checked, unchecked = (_hf_step(built, prompt) for _ in range(2))
        peer = partial(_peer_step, prompt)
        rows.append(_with_peer(decode, checked, peer, sizes, peers, off=_unchecked(unchecked)))
    return rows


def _hf_forward(built: tuple[Any, ...]) -> Callable[[], Any]:
    """A forward of one token of :func:`~posenc.bench.peers.hf_llama`'s model, no cache."""
    model, token = built[0], torch.zeros(1, 1, dtype=torch.long)
    return lambda: model(input_ids=token, use_cache=False).logits


def _hf_step(built: tuple[Any, ...], prompt: torch.Tensor) -> Callable[[], Any]:
    """A decode step of :func:`~posenc.bench.peers.hf_llama`'s model over a cache of its
    own, after ``prompt``."""
    model, new_cache, kwarg = built
    cache = {kwarg: new_cache(), "use_cache": True}
    return _decoder(lambda ids, **c: model(input_ids=ids, **c).logits, prompt, **cache)


def _peer_forward(**config: Any) -> Callable[[], Any]:
    return _hf_forward(peers_mod.hf_llama(**config))


def _peer_step(prompt: torch.Tensor, **config: Any) -> Callable[[], Any]:
    return _hf_step(peers_mod.hf_llama(**config), prompt)


def _no_grad(calls: Calls) -> Calls:
    def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with torch.no_grad():
                return fn()

        return call

    return {name: wrap(fn) for name, fn in calls.items()}


def run(
    encodings: Sequence[str] | None = None,
    kinds: Sequence[str] = ("rope", "alibi"),
    heads: int = 2,
    head_dim: int = 64,
    length: int = 8,
    vocab_size: int = 256,
    dim: int = 128,
    n_layers: int = 4,
    n_heads: int = 2,
    mlp_ratio: int = 4,
    prefix: int = 8,
    threads: int = 1,
    calls: int = 10,
    repeat: int = 200,
    warmup: int = 20,
    peers: bool = True,
    hf_patches: Mapping[str, Callable[[Any], Any]] | None = None,
) -> list[dict[str, Any]]:
    """The records of every row (RoPE, attention plain then with each of ``encodings``,
    default every bias encoding of :func:`~posenc.bench.bias_attention.bias_encodings`,
    then a forward and a decode step per model encoding of ``kinds``, then per patch of
    ``hf_patches`` of the Llama), timed together a round of every row at a time, under
    ``no_grad`` with ``threads`` torch threads."""
    names = list(encodings) if encodings is not None else bias_encodings()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            built = [_rope_row(heads, head_dim, peers, calls)]
            built += _attention_rows(names, heads, length, head_dim, calls)
            # every call of a decode step adds a token: the warm-ups, the rounds, the trial
            steps = warmup + repeat + 1
            built += _model_rows(
                kinds, vocab_size, dim, n_layers, n_heads, mlp_ratio, prefix, steps, peers
            )
            sizes = {"vocab_size": vocab_size, "dim": dim, "n_layers": n_layers}
            sizes |= {"n_heads": n_heads, "mlp_ratio": mlp_ratio}
            built += _patched_rows(hf_patches or {}, sizes, prefix, peers)
        timed = interleaved_rows(
            [_no_grad(impls) for _, impls, _ in built], repeat=repeat, warmup=warmup
        )
    finally:
        torch.set_num_threads(before)
    return [
        _per_call(row({**config, "threads": threads}, stats, FLOOR, skipped))
        for (config, _, skipped), stats in zip(built, timed, strict=True)
    ]
