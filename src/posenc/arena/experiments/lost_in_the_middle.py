"""``lost-in-the-middle``: key-value retrieval accuracy by where the answer sits (Liu et al.
2023, "Lost in the middle: how language models use long contexts", arXiv:2307.03172, §4).

A small causal model learns to answer ``BOS k1 v1 ... kn vn QUERY kq`` with the value of
``kq``, half its batches with the query also at the start (``BOS QUERY kq ...``, Liu et al.'s
query-aware contextualisation). It is scored by exact match for every gold position
``g in range(n)``, for each number of pairs ``n`` of the preset (the first is the training
number, the others longer contexts) and both query placements. ``learned`` has a table of
exactly the longest training row and is recorded as cannot-run past it. With ``--hf-model``
the same probe runs as text prompts on a local Hugging Face model (:mod:`.hf_probe`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ...models import TransformerLM
from ...positions import PositionOutOfRangeError
from ..evaluate import task_accuracy
from ..runner import RunContext, unit_name
from ..tasks import KV_MODES, KV_VOCAB, TaskBatch, kv_batch, kv_length, kv_probes
from .hf_probe import run_probe
from .language_model import cannot_run_note, encoding_spec

__all__ = ["MODES", "NAME", "kv_model", "kv_train_length", "run", "train_queries"]

NAME = "lost-in-the-middle"

#: query placements: the key line after the pairs only, or before them too
MODES = KV_MODES


def run(ctx: RunContext) -> None:
    """Train (or load) a model per encoding and seed; measure accuracy at each gold position;
    then probe ``ctx.hf_model`` when one is given."""
    for seed in ctx.preset.seeds:
        for encoding in ctx.task_encodings():
            ctx.unit(
                unit_name(NAME, encoding, f"seed{seed}"),
                functools.partial(_measure, ctx, encoding, seed),
            )
    if ctx.hf_model is not None:
        run_probe(ctx, NAME)


def train_queries(n_pairs: int) -> int:
    """Queries per training row of ``n_pairs`` pairs (multi-query recall: more supervision per
    row; a training row stays shorter than an evaluation row of twice the pairs)."""
    return max(1, n_pairs // 2)


def kv_train_length(n_pairs: int) -> int:
    """The longest training row with ``n_pairs`` pairs (query-first, :func:`train_queries`
    queries): the ``train_length`` of the records and the length of ``learned``'s table."""
    return kv_length(n_pairs, query_first=True, n_queries=train_queries(n_pairs))


def kv_model(ctx: RunContext, encoding: str, seed: int) -> TransformerLM:
    """The causal model with ``encoding`` trained with ``seed`` on key-value retrieval with
    the preset's number of pairs (unit ``train--kv--<encoding>--seed<seed>``)."""
    preset = ctx.preset
    n, m = preset.kv_pairs, train_queries(preset.kv_pairs)
    spec = encoding_spec(encoding, kv_train_length(n))
    model = ctx.new_model(preset.task_model, spec, seed, KV_VOCAB)
    config = preset.kv

    def make_batch(generator: torch.Generator) -> TaskBatch:
        query_first = bool(torch.randint(0, 2, (), generator=generator))
        return kv_batch(config.batch_size, n, generator, query_first=query_first, n_queries=m)

    return ctx.trained(
        unit_name("train", "kv", encoding, f"seed{seed}"), model, make_batch, config, seed
    )


def _measure(ctx: RunContext, encoding: str, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    model = kv_model(ctx, encoding, seed)
    train_length = kv_train_length(preset.kv_pairs)
    records: list[dict[str, Any]] = []
    bar = ctx.progress.task(f"evaluate kv {encoding}", len(MODES) * sum(preset.kv_test_pairs))
    for probe in kv_probes(preset.kv_test_pairs, seed):
        base = probe.record(
            experiment=NAME, encoding=encoding, seed=seed, train_length=train_length
        )
        batch = kv_batch(
            preset.kv_eval_rows,
            probe.n_pairs,
            probe.generator,
            gold=probe.gold,
            query_first=probe.query_first,
        )
        try:
            records.append({**base, "value": task_accuracy(model, batch)})
        except PositionOutOfRangeError as e:
            records.append({**base, "value": None, "note": cannot_run_note(e)})
        bar.advance(1, tokens=batch.inputs.numel())
    bar.close()
    return records
