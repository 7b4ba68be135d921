"""Case 7: what ``torch.compile`` makes of a :class:`~posenc.models.TransformerLM`, in one
process: a greedy decode step, and a training step per kind of encoding.

The decode row times three ways to decode the same model one token at a time after the same
prompt, in turns: eager with a :class:`~posenc.attn.KVCache` (the floor), eager with a
:class:`~posenc.attn.StaticKVCache` (the same shapes at every step), and
``torch.compile(model, fullgraph=True)`` over the static cache; its config holds how many
graphs the compiled step made over the whole run (two at most: the prompt and the step).
The training rows time a step (forward, loss, backward, AdamW) of a rotary, a bias and a
``nope`` model, eager (the floor) against compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo as dynamo
from torch._dynamo.utils import counters

from ..models import TransformerLM
from .timing import interleaved_rows, row
from .training import VOCAB, _model, _step

__all__ = ["run"]

FLOOR = "eager"


def _decoder(model, static: bool, compiled: bool, prefix: int, steps: int) -> Callable[[], Any]:
    """One greedy token per call, on a cache of its own after a ``prefix``-token prompt."""
    cache = model.new_cache(1, prefix + steps + 1, static=static)
    forward = torch.compile(model, fullgraph=True) if compiled else model
    prompt = torch.randint(0, VOCAB, (1, prefix), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        state = {"token": forward(prompt, cache=cache)[:, -1:].argmax(-1)}

    def step() -> None:
        with torch.no_grad():
            state["token"] = forward(state["token"], cache=cache)[:, -1:].argmax(-1)

    return step


def run(
    dim: int = 256,
    n_layers: int = 4,
    n_heads: int = 8,
    prefix: int = 64,
    lengths: Sequence[int] = (256,),
    kinds: Sequence[str] = ("rope", "alibi", "nope"),
    batch: int = 4,
    repeat: int = 20,
    warmup: int = 3,
) -> list[dict[str, Any]]:
    """A decode record (``eager``, ``eager static``, ``compiled static``) and one training
    record per encoding of ``kinds`` and length (``eager``, ``compiled``)."""
    torch.manual_seed(0)
    dynamo.reset()
    counters.clear()
    model = TransformerLM(VOCAB, dim, n_layers, n_heads, encoding="rope").eval()
    steps = warmup + repeat
    decode = {
        FLOOR: _decoder(model, False, False, prefix, steps),
        "eager static": _decoder(model, True, False, prefix, steps),
        "compiled static": _decoder(model, True, True, prefix, steps),
    }
    config = {"step": "decode", "dim": dim, "n_layers": n_layers, "n_heads": n_heads}
    (decoded,) = interleaved_rows([decode], repeat=repeat, warmup=warmup)
    config["graphs"] = counters["stats"]["unique_graphs"]  # of the compiled step, all steps
    records = [row(config, decoded, FLOOR)]
    rows: list[dict[str, Callable[[], Any]]] = []
    configs: list[dict[str, Any]] = []
    for length in lengths:
        tokens = torch.randint(0, VOCAB, (batch, length + 1))
        for name in kinds:
            eager, compiled = (_model(name, length, dim, n_layers, n_heads) for _ in range(2))
            compiled.load_state_dict(eager.state_dict())
            compiled.compile(fullgraph=True)  # the forward; the optimizer stays eager
            rows.append({FLOOR: _step(eager, tokens), "compiled": _step(compiled, tokens)})
            configs.append({"step": f"train {name}", "L": length, "batch": batch})
    stats = interleaved_rows(rows, repeat=repeat, warmup=warmup)
    return records + [row(c, s, FLOOR) for c, s in zip(configs, stats, strict=True)]
