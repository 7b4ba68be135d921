"""Synthetic tasks for the arena: copy / reverse and key-value retrieval.

Copy and reverse test length generalisation: train on short strings, ask for longer ones
(Kazemnejad et al. 2023, "The impact of positional encoding on length generalization in
transformers"; Ruoss et al. 2023, "Randomized positional encodings boost length
generalization of transformers"). Key-value retrieval measures how accuracy depends on where
the answer sits in the context (Liu et al. 2023, "Lost in the middle").

Every batch is a pure function of the ``torch.Generator`` passed in (drawn on the CPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...config import check_int

__all__ = [
    "BOS",
    "EOS",
    "IGNORE",
    "KV_BOS",
    "KV_MODES",
    "KV_VOCAB",
    "N_KEYS",
    "N_SYMBOLS",
    "N_VALUES",
    "PAD",
    "QUERY",
    "SEP",
    "SEQUENCE_TASKS",
    "SEQUENCE_VOCAB",
    "KVProbe",
    "TaskBatch",
    "kv_batch",
    "kv_eval_generator",
    "kv_length",
    "kv_probes",
    "sequence_batch",
    "sequence_length",
]

IGNORE = -100
"""Target id of a position that is not scored (``F.cross_entropy``'s default ``ignore_index``)."""

# copy / reverse: symbols 0..N_SYMBOLS-1, then the four special tokens
N_SYMBOLS = 16
BOS, SEP, EOS, PAD = N_SYMBOLS, N_SYMBOLS + 1, N_SYMBOLS + 2, N_SYMBOLS + 3
SEQUENCE_VOCAB = N_SYMBOLS + 4
SEQUENCE_TASKS = ("copy", "reverse")

# key-value retrieval: keys, then values, then BOS and QUERY
N_KEYS = 64
N_VALUES = 64
KV_BOS = N_KEYS + N_VALUES
QUERY = KV_BOS + 1
KV_VOCAB = N_KEYS + N_VALUES + 2


@dataclass(frozen=True)
class TaskBatch:
    """A batch of token ids and the token each position must predict.

    Loss: ``F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)``.

    Shapes:
        inputs: ``[batch, seq]`` int64 token ids.
        targets: ``[batch, seq]`` int64, the id position ``t`` must predict, or
        :data:`IGNORE` where nothing is scored.
        positions: ``[batch, seq]`` int64 positions the model is given
        (:mod:`posenc.positions.samplers`), or None: ``arange(seq)``.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    positions: torch.Tensor | None = None

    def __post_init__(self) -> None:
        names = ("inputs", "targets") + (() if self.positions is None else ("positions",))
        for name in names:
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 2:
                raise ValueError(f"TaskBatch.{name} must be a 2-D int64 tensor, got {_describe(t)}")
            if t.shape != self.inputs.shape:
                raise ValueError(
                    f"TaskBatch.inputs {tuple(self.inputs.shape)} and {name} "
                    f"{tuple(t.shape)} must have the same shape"
                )

    def rows(self, index: slice, device: torch.device) -> TaskBatch:
        """The rows ``index`` of the batch on ``device``."""
        positions = None if self.positions is None else self.positions[index].to(device)
        return TaskBatch(self.inputs[index].to(device), self.targets[index].to(device), positions)

    def scored_tokens(self) -> int:
        """The number of scored positions (targets other than :data:`IGNORE`)."""
        return int((self.targets != IGNORE).sum())


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dim()}-D {t.dtype} tensor"
    return type(t).__name__


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator, got {generator!r}")
    return generator


def sequence_length(length: int) -> int:
    """Length of the inputs of one copy / reverse row of ``length`` symbols:
    ``BOS x1..xn SEP y1..yn EOS`` less its last token, ``2 * length + 2``."""
    check_int("length", length)
    return 2 * length + 2


def sequence_batch(
    task: str, batch_size: int, min_length: int, max_length: int, generator: torch.Generator
) -> TaskBatch:
    """A batch of copy or reverse rows, ``BOS x1..xn SEP y1..yn EOS``.

    ``y = x`` (copy) or ``x`` reversed (reverse); each row's ``n`` is uniform in
    ``[min_length, max_length]`` and its symbols uniform in ``[0, N_SYMBOLS)``. Inputs are
    the row less its last token, targets the row less its first: only ``y1..yn`` and the final
    ``EOS`` are scored (the first scored input is ``SEP``). Rows are right-padded with
    :data:`PAD` (targets :data:`IGNORE`) to ``sequence_length(max_length)``.

    Shapes:
        inputs, targets: ``[batch_size, 2 * max_length + 2]``.
    """
    if task not in SEQUENCE_TASKS:
        raise ValueError(f"task must be one of {SEQUENCE_TASKS}, got {task!r}")
    check_int("batch_size", batch_size)
    check_int("min_length", min_length)
    check_int("max_length", max_length, minimum=min_length)
    generator = _check_generator(generator)

    lengths = torch.randint(min_length, max_length + 1, (batch_size, 1), generator=generator)
    x = torch.randint(0, N_SYMBOLS, (batch_size, max_length), generator=generator)

    width = 2 * max_length + 3  # the full row, before the input/target shift
    j = torch.arange(width).expand(batch_size, width)  # (B, W) position in the row
    i = torch.arange(max_length).expand(batch_size, max_length)  # (B, max_length)
    # reverse: y_i = x_(n-1-i) for i < n (the rest is never read)
    y = x.gather(1, (lengths - 1 - i).clamp(min=0)) if task == "reverse" else x
    row = torch.full((batch_size, width), PAD, dtype=torch.int64)
    row[:, 0] = BOS
    in_x = (j >= 1) & (j <= lengths)
    row[in_x] = x.gather(1, (j - 1).clamp(0, max_length - 1))[in_x]
    row[j == lengths + 1] = SEP
    in_y = (j >= lengths + 2) & (j <= 2 * lengths + 1)
    row[in_y] = y.gather(1, (j - lengths - 2).clamp(0, max_length - 1))[in_y]
    row[j == 2 * lengths + 2] = EOS

    inputs = row[:, :-1]
    targets = row[:, 1:].clone()
    t = j[:, :-1]
    scored = (t >= lengths + 1) & (t <= 2 * lengths + 1)  # targets y1..yn and EOS
    targets[~scored] = IGNORE
    return TaskBatch(inputs.contiguous(), targets)


def kv_length(n_pairs: int, query_first: bool = False, n_queries: int = 1) -> int:
    """Length of one key-value row:
    ``BOS [QUERY kq1] k1 v1 ... kn vn QUERY kq1 vq1 ... QUERY kqm`` (``m = n_queries``)."""
    check_int("n_pairs", n_pairs, maximum=N_KEYS)
    check_int("n_queries", n_queries, maximum=n_pairs)
    return 2 * n_pairs + 3 * n_queries + (2 if query_first else 0)


def kv_batch(
    batch_size: int,
    n_pairs: int,
    generator: torch.Generator,
    *,
    gold: int | None = None,
    query_first: bool = False,
    n_queries: int = 1,
) -> TaskBatch:
    """A batch of key-value retrieval rows: ``BOS k1 v1 ... kn vn QUERY kq``.

    Keys are distinct within a row (ids ``[0, N_KEYS)``), values uniform in
    ``[N_KEYS, N_KEYS + N_VALUES)`` (they may repeat). The queried key is the ``gold``-th
    pair's key (0-based; uniform per row when ``gold`` is None). With ``query_first`` the
    row starts ``BOS QUERY kq`` as well (Liu et al.'s query-aware contextualisation). Only
    the last position is scored: its target is the gold value.

    With ``n_queries = m > 1`` (multi-query associative recall, Arora et al. 2023, "Zoology",
    arXiv:2312.04927; for training: m times the supervision per row) the row asks ``m``
    distinct keys in a row, each answered before the next is asked:
    ``BOS k1 v1 ... kn vn QUERY kq1 vq1 QUERY kq2 vq2 ... QUERY kqm``, and every ``vqi`` is
    scored (at the position of ``kqi``). ``gold`` then fixes the first query (uniform
    otherwise, the others a uniform draw of the remaining pairs); with ``query_first`` the row
    starts ``BOS QUERY kq1``.

    Shapes:
        inputs, targets: ``[batch_size, kv_length(n_pairs, query_first, n_queries)]``.
    """
    check_int("batch_size", batch_size)
    check_int("n_pairs", n_pairs, maximum=N_KEYS)
    check_int("n_queries", n_queries, maximum=n_pairs)
    if gold is not None:
        check_int("gold", gold, minimum=0, maximum=n_pairs - 1)
    if not isinstance(query_first, bool):
        raise ValueError(f"query_first must be a bool, got {type(query_first).__name__}")
    generator = _check_generator(generator)

    keys = torch.rand(batch_size, N_KEYS, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(N_KEYS, N_KEYS + N_VALUES, (batch_size, n_pairs), generator=generator)
    if n_queries == 1:  # (the draws of the single-query rows, unchanged)
        if gold is None:
            asked = torch.randint(0, n_pairs, (batch_size, 1), generator=generator)
        else:
            asked = torch.full((batch_size, 1), gold, dtype=torch.int64)
    else:  # a random order of the pairs, the gold one first when given
        score = torch.rand(batch_size, n_pairs, generator=generator)
        if gold is not None:
            score[:, gold] = -1.0
        asked = score.argsort(dim=1)[:, :n_queries]
    kq = keys.gather(1, asked)  # (B, m)
    answer = values.gather(1, asked)  # (B, m)

    pairs = torch.stack([keys, values], dim=2).flatten(1)  # (B, n_pairs, 2) -> (B, 2 * n_pairs)
    bos = torch.full((batch_size, 1), KV_BOS, dtype=torch.int64)
    # QUERY kq1 vq1 QUERY kq2 vq2 ... QUERY kqm (the last value is only a target)
    asks = torch.stack([torch.full_like(kq, QUERY), kq, answer], dim=2).flatten(1)[:, :-1]
    parts = [bos, pairs, asks]
    if query_first:
        parts.insert(1, torch.cat([torch.full_like(kq[:, :1], QUERY), kq[:, :1]], dim=1))
    inputs = torch.cat(parts, dim=1)
    targets = torch.full_like(inputs, IGNORE)
    start = inputs.shape[1] - 3 * n_queries + 2  # the column of kq1 in the asks
    targets[:, start::3] = answer
    return TaskBatch(inputs, targets)


#: query placements of the key-value probe: after the pairs only, or before them too
KV_MODES = ("query-last", "query-first")


def kv_eval_generator(seed: int, n_pairs: int, mode: str) -> torch.Generator:
    """The generator of the evaluation rows of ``n_pairs`` pairs in ``mode`` (one of
    :data:`KV_MODES`): fixed per seed, so every encoding (and a Hugging Face probe) sees the
    same rows, and disjoint from training's step generators."""
    return torch.Generator().manual_seed(20_000 + seed * 1000 + 2 * n_pairs + KV_MODES.index(mode))


@dataclass(frozen=True)
class KVProbe:
    """One measured case of the key-value probe: ``n_pairs`` pairs, the query placed by
    ``mode``, the gold pair at index ``gold``; rows are drawn from ``generator`` (shared by
    the cases of one ``(n_pairs, mode)``, in order)."""

    n_pairs: int
    mode: str
    gold: int
    generator: torch.Generator

    @property
    def query_first(self) -> bool:
        """Whether the query also comes before the pairs (query-aware contextualisation)."""
        return self.mode == "query-first"

    @property
    def length(self) -> int:
        """Tokens in one row of this case."""
        return kv_length(self.n_pairs, self.query_first)

    def record(self, **fields: Any) -> dict[str, Any]:
        """The keys of this case's measurement record, plus ``fields``."""
        return {
            **fields,
            "eval_length": self.length,
            "metric": "accuracy",
            "mode": self.mode,
            "task": "kv",
            "gold_position": self.gold,
            "n_pairs": self.n_pairs,
        }


def kv_probes(test_pairs: Sequence[int], seed: int) -> Iterator[KVProbe]:
    """Every case of the probe for ``seed``: each number of pairs, each query placement
    (:data:`KV_MODES`), each gold position, with the same rows for every model."""
    for n_pairs in test_pairs:
        for mode in KV_MODES:
            generator = kv_eval_generator(seed, n_pairs, mode)
            for gold in range(n_pairs):
                yield KVProbe(n_pairs, mode, gold, generator)
