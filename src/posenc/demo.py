"""The demo a newcomer runs first (``make demo`` or ``posenc demo``).

It prints (a) every registered encoding, (b) the source article's worked example computed
for real, and (c) a miniature of the arena: the same tiny :class:`~posenc.models.TransformerLM`
trained with each encoding on the same synthetic copy task, then evaluated at the training
length and at twice that length.

The task: a random block of ``PERIOD`` tokens repeated to fill the sequence. Every token after
the first block is a copy of the one ``PERIOD`` places back, so a model can predict it only if
it can tell where tokens are; the loss is measured on those tokens. Without position, the
best guess is uniform: ``ln(VOCAB_SIZE)`` nats.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from . import registry
from .base import AdditiveEncoding
from .models import TransformerLM
from .positions import PositionOutOfRangeError
from .tables import encodings_table, format_table

__all__ = [
    "arena_row",
    "copy_loss",
    "evaluate",
    "model_spec",
    "repeat_batch",
    "run_demo",
    "train",
    "worked_example",
]

TRAIN_LEN = 64  # sequence length while training
EVAL_LEN = 128  # twice as long: extrapolation
PERIOD = 16  # length of the random block that repeats
VOCAB_SIZE = 8
DIM, N_LAYERS, N_HEADS = 64, 2, 4
BATCH_SIZE = 16
LR = 3e-3
WARMUP_STEPS = 20
STEPS = 500  # per encoding: sinusoidal learns the task at ~350, RoPE at ~150
EVAL_BATCHES = 4

EMBEDDING = (0.51, -0.22, 0.88, 0.14)  # the article's embedding of "DataCamp" (dim 4)


def worked_example(position: int) -> torch.Tensor:
    """The article's embedding ``[0.51, -0.22, 0.88, 0.14]`` plus the dim-4 sinusoidal
    encoding of ``position``: ``[0.51, 0.78, 0.88, 1.14]`` at position 0.

    Shapes:
        returns ``[4]``.
    """
    enc = registry.create("sinusoidal", dim=4)
    x = torch.tensor(EMBEDDING).view(1, 1, 4)  # [batch, seq, dim]
    return enc(x, positions=torch.tensor([position]))[0, 0]


def repeat_batch(
    batch_size: int,
    seq_len: int,
    generator: torch.Generator,
    period: int = PERIOD,
    vocab_size: int = VOCAB_SIZE,
) -> torch.Tensor:
    """``batch_size`` sequences, each a random block of ``period`` tokens (ids below
    ``vocab_size``) repeated to ``seq_len`` tokens (a multiple of ``period``), drawn from
    ``generator``.

    Shapes:
        returns ``[batch_size, seq_len]`` int64 token ids.
    """
    if seq_len % period:
        raise ValueError(f"seq_len ({seq_len}) must be a multiple of period ({period})")
    block = torch.randint(0, vocab_size, (batch_size, period), generator=generator)
    return block.repeat(1, seq_len // period)


def copy_loss(model: TransformerLM, tokens: torch.Tensor, period: int = PERIOD) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over the copied tokens: every token after the
    first block, each predicted from the tokens before it.

    Shapes:
        tokens: ``[batch, seq]``; returns a scalar.
    """
    logits = model(tokens)[:, period - 1 : -1]  # [b, seq - period, vocab]: predicts tokens[period:]
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, period:].flatten())


@torch.no_grad()
def evaluate(model: TransformerLM, seq_len: int, seed: int) -> float:
    """The copy loss of ``model`` on ``EVAL_BATCHES`` held-out batches of length ``seq_len``
    (the same batches for every model with the same ``seed``)."""
    generator = torch.Generator().manual_seed(seed + 1_000_003)  # disjoint from training
    was_training = model.training
    model.eval()
    try:
        losses = [
            copy_loss(model, repeat_batch(BATCH_SIZE, seq_len, generator)).item()
            for _ in range(EVAL_BATCHES)
        ]
    finally:
        model.train(was_training)
    return sum(losses) / len(losses)


def model_spec(name: str) -> str | dict[str, Any]:
    """The encoding spec the demo gives :class:`TransformerLM` for the encoding ``name``:
    the name, or a dict with the keys it needs (a learned table sized to ``TRAIN_LEN``)."""
    if name == "learned":
        return {"name": name, "max_positions": TRAIN_LEN}
    return name


def train(name: str, steps: int, seed: int) -> tuple[TransformerLM, float]:
    """Train the demo model with encoding ``name`` for ``steps`` steps of AdamW on
    ``repeat_batch`` data at length ``TRAIN_LEN``; every encoding sees the same batches.

    Returns:
        the trained model and the loss of its last training batch.
    """
    with torch.random.fork_rng(devices=[]):  # seed the initialisation, leave global state be
        torch.manual_seed(seed)
        model = TransformerLM(VOCAB_SIZE, DIM, N_LAYERS, N_HEADS, encoding=model_spec(name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS)
    )
    generator = torch.Generator().manual_seed(seed)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        loss = copy_loss(model, repeat_batch(BATCH_SIZE, TRAIN_LEN, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return model, loss.item()


def echo(line: str) -> None:
    """Print ``line`` at once (the default output of :func:`run_demo`)."""
    print(line, flush=True)


def _vector(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:5.2f}" for v in t.tolist()) + "]"


def _print_worked_example(out: Callable[[str], Any]) -> None:
    enc = registry.create("sinusoidal", dim=4)
    assert isinstance(enc, AdditiveEncoding)  # create() returns an Encoding of any kind
    embedding = _vector(torch.tensor(EMBEDDING))
    out("The article's worked example (dimension 4, sinusoidal encoding):")
    for position, note in ((0, "what the first layer receives"), (5, "same token, new vector")):
        pe = enc.encode(torch.tensor([position]))[0]
        out(f"  position {position}:  {embedding}  embedding of the token 'DataCamp'")
        out(f"             + {_vector(pe)}  encoding of position {position}")
        out(f"             = {_vector(worked_example(position))}  {note}")


def arena_row(name: str, steps: int, seed: int) -> list[str]:
    """Train with encoding ``name`` and return its table row: name, kind, the loss at
    ``TRAIN_LEN`` and at ``EVAL_LEN`` (or the error that a position limit raises), seconds."""
    start = time.perf_counter()
    model, _ = train(name, steps, seed)
    row = [name, registry.info(name).kind]
    for seq_len in (TRAIN_LEN, EVAL_LEN):
        try:
            row.append(f"{evaluate(model, seq_len, seed):.3f}")
        except PositionOutOfRangeError as e:
            row.append(f"error: length {seq_len} exceeds {e.limit_name}={e.limit}")
    row.append(f"{time.perf_counter() - start:.1f}")
    return row


#: the encodings the demo trains by default: each kind, and the contrasts the article draws
DEMO_ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "xpos", "alibi", "t5")


def check_names(names: Sequence[str]) -> None:
    """Raise ``ValueError`` for a name the demo cannot train (unknown, or an encoding of
    image-grid coordinates), before minutes of training rather than after."""
    for name in names:
        if registry.get(name).position_axes != 1:
            raise ValueError(
                f"{name!r} encodes image-grid coordinates: the demo trains a text model, "
                "so choose an encoding of 1-D positions"
            )


def run_demo(
    steps: int = STEPS,
    seed: int = 0,
    out: Callable[[str], Any] = echo,
    names: Sequence[str] | None = None,
) -> None:
    """Print the encodings, the article's worked example and the miniature arena.

    Args:
        steps: training steps per encoding.
        seed: seed of the data and of every model's initialisation.
        out: called with each line of output.
        names: the encodings to train (default: :data:`DEMO_ENCODINGS`, one or two of each
            kind, so the demo stays near a minute; the arena trains them all).
    """
    names = [n for n in DEMO_ENCODINGS if n in registry.available()] if names is None else names
    check_names(names)
    out("posenc: positional encodings for transformers\n")
    out(encodings_table())
    out("")
    _print_worked_example(out)
    out("")
    out(
        f"Miniature arena: a {N_LAYERS}-layer, {N_HEADS}-head, dim-{DIM} TransformerLM per "
        f"encoding, {steps} AdamW steps on the same batches of length {TRAIN_LEN}."
    )
    chance = math.log(VOCAB_SIZE)
    out(
        f"Task: a random block of {PERIOD} tokens (vocabulary {VOCAB_SIZE}) repeated; the loss "
        f"(nats) is on the repeats. Chance: ln {VOCAB_SIZE} = {chance:.2f}."
    )
    rows = []
    threads = torch.get_num_threads()
    # A model this small runs best on one thread; more only contend with each other (and
    # collapse when other processes share the cores).
    torch.set_num_threads(1)
    try:
        for name in names:
            rows.append(arena_row(name, steps, seed))
            out(f"  trained {name} ({rows[-1][-1]} s)")
    finally:
        torch.set_num_threads(threads)
    out("")
    headers = ("encoding", "kind", f"loss @{TRAIN_LEN}", f"loss @{EVAL_LEN} (extrapolation)", "s")
    out(format_table(headers, rows))
    out(
        f"\nA loss near {chance:.2f} means the model has not learned to copy in {steps} steps; "
        f"near 0, it has."
    )
