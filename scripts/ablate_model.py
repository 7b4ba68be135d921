"""Ablate what TransformerLM does differently from a plain GPT, on key-value retrieval and on
the byte-level language model (docs/arena.md, "The model").

Each variant changes one thing of the model against its defaults (untied head, weights of
standard deviation ``fan_in ** -0.5``); the recipe is the arena's own (its training loop,
AdamW, warm-up then cosine, weight decay 0.1 on matrices, gradient clip 1). Key-value
retrieval: 8 pairs, every pair asked once per row, query-first on half the batches; scored
by single-query accuracy at the trained number of pairs, both query placements. Language
model: validation perplexity at the training length on the Python standard library.

    .venv/bin/python scripts/ablate_model.py --task kv --seeds 0
    .venv/bin/python scripts/ablate_model.py --task lm --seeds 0 1 2 --variants default tied

Prints a Markdown table: per variant, the mean over seeds and the spread (max - min).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from posenc.arena.data.batches import lm_batch
from posenc.arena.data.corpus import load_corpus
from posenc.arena.data.tasks import KV_MODES, KV_VOCAB, TaskBatch, kv_batch
from posenc.arena.measuring.evaluate import lm_loss, perplexity, task_accuracy
from posenc.arena.running.training import TrainConfig, train_model
from posenc.models import TransformerLM

KV = TrainConfig(steps=2000, batch_size=64, lr=1e-3, warmup_steps=100, checkpoint_every=0)
LM = TrainConfig(steps=400, batch_size=16, lr=3e-3, warmup_steps=40, checkpoint_every=0)
N_PAIRS, LENGTH, VOCAB_BYTES = 8, 64, 256


def gpt2_init(model: TransformerLM) -> None:
    """GPT-2's fixed 0.02 (writes to the residual divided by ``sqrt(2 n_layers)``), as the
    model had it before."""
    for block in model.blocks:
        reads, writes = block.projections()
        for linear in reads:
            nn.init.normal_(linear.weight, std=0.02)
        for linear in writes:
            nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * model.n_layers))
    if model.head is not None:
        nn.init.normal_(model.head.weight, std=0.02)


#: variant -> (TransformerLM keywords, what to do to the built model)
VARIANTS: dict[str, tuple[dict[str, object], Callable[[TransformerLM], None] | None]] = {
    "default": ({}, None),
    "tied": ({"tie_embeddings": True}, None),
    "gpt2-init": ({}, gpt2_init),
    "tied+gpt2-init": ({"tie_embeddings": True}, gpt2_init),  # the model before the fix
}


def build(variant: str, vocab: int, dim: int, encoding: str, seed: int) -> TransformerLM:
    torch.manual_seed(seed)
    kwargs, after = VARIANTS[variant]
    model = TransformerLM(vocab, dim, 2, 4, encoding=encoding, **kwargs)  # type: ignore[arg-type]
    if after is not None:
        after(model)
    return model


def kv_score(model: TransformerLM, seed: int) -> float:
    """Single-query accuracy over every gold position and both placements."""
    scores = []
    for mode in KV_MODES:
        generator = torch.Generator().manual_seed(10_000 + seed)
        for gold in range(N_PAIRS):
            batch = kv_batch(64, N_PAIRS, generator, gold=gold, query_first=mode == "query-first")
            scores.append(task_accuracy(model, batch))
    return statistics.fmean(scores)


def run_kv(variant: str, encoding: str, seed: int) -> float:
    model = build(variant, KV_VOCAB, 64, encoding, seed)

    def make_batch(generator: torch.Generator) -> TaskBatch:
        first = bool(torch.randint(0, 2, (), generator=generator))
        return kv_batch(KV.batch_size, N_PAIRS, generator, query_first=first, n_queries=N_PAIRS)

    train_model(model, make_batch, KV, seed=seed)
    return kv_score(model.eval(), seed)


def run_lm(variant: str, encoding: str, seed: int) -> float:
    corpus = load_corpus(max_bytes=4_000_000)
    model = build(variant, VOCAB_BYTES, 64, encoding, seed)

    def make_batch(generator: torch.Generator) -> TaskBatch:
        return lm_batch(corpus.train, LM.batch_size, LENGTH, generator)

    train_model(model, make_batch, LM, seed=seed)
    with torch.no_grad():
        loss = lm_loss(
            model.eval(), corpus.valid, LENGTH, "chunks", n_tokens=16384, stride=LENGTH, start=0
        )
    return perplexity(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("kv", "lm"), default="kv")
    parser.add_argument("--encodings", nargs="+", default=["rope", "alibi"])
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args()
    measure = run_kv if args.task == "kv" else run_lm
    metric = "retrieval accuracy" if args.task == "kv" else "validation perplexity"
    print(f"| variant | {' | '.join(args.encodings)} |")
    print(f"|---|{'---|' * len(args.encodings)}")
    for variant in args.variants:
        cells = []
        for encoding in args.encodings:
            start = time.perf_counter()
            values = [measure(variant, encoding, seed) for seed in args.seeds]
            spread = f" ± {max(values) - min(values):.2f}" if len(values) > 1 else ""
            cells.append(f"{statistics.fmean(values):.2f}{spread}")
            print(f"  ({variant}, {encoding}: {values}, {time.perf_counter() - start:.0f} s)")
        print(f"| {variant} | {' | '.join(cells)} |", flush=True)
    print(f"\n{metric}; {len(args.seeds)} seed(s) {args.seeds}; spread = max - min over seeds")


if __name__ == "__main__":
    main()
