"""The one place that decides which backend runs a bias encoding's attention.

:func:`plan_bias` takes what decides it (the encoding's capabilities, the shapes, the
masks, whether gradients are needed, the device and the backend asked for) and returns a
:class:`BiasPlan`; :func:`posenc.attention` runs it (:mod:`posenc.attn.bias`),
:class:`~posenc.models.TransformerLM` asks it whether its layers run on a materialised
bias, which it then computes once for all of them (where :func:`shares_table`), and
``posenc list`` asks it what an encoding holds in memory (:func:`bias_memory`). ``auto``
picks, in order:

============  =====================================================  ===================
runner        where                                                  module
============  =====================================================  ===================
``scores``    ``needs_scores`` (CoPE): the explicit softmax by       :mod:`.contextual`
              blocks of query rows, whatever else holds
``math`` or   keys or values not all finite (``math``); softcap or   :mod:`.explicit`
``flex``      sinks (:func:`~.backends.explicit_runner`: flex at
              inference where it pays, never for sinks)
``shaw``      on the CPU, ``relative_tables``, ``q_len == k_len``,   :mod:`.shaw_grad`
              no masks, keys in index order (or not causal), not
              compiling: inference and training
``math``      the encoding adds to the values (Shaw's values)        :mod:`.bias`
``blocks``    on the CPU, ``shift_invariant`` (ALiBi, T5, KERPLE),    :mod:`.bias_blocks`
              default positions with ``q_len == k_len``, no masks,
              not compiling: inference and training
``rows``      on the CPU, a bias of the positions alone (FIRE), no   :mod:`.bias_rows`
              table given, ``q_len == k_len``, ``[len]`` positions,
              keys in index order (or not causal), no masks, not
              compiling
``linear``    ``linear_slopes`` (ALiBi) on the CPU, not compiling,   :mod:`.linear_bias`
              centring coordinates within ``MAX_WIDTH_RATIO``
``flex``      ``FLEX_MIN_SCORES`` scores per head or more where      :mod:`.flex`
              flex runs, not training on the CPU
``flash``     training on the CPU (the flash kernel with a           :mod:`.bias_grad`
              blockwise backward), not compiling
``sdpa``      everything else: SDPA with the materialised bias       :mod:`.bias`
============  =====================================================  ===================

A window or chunk (:mod:`.pattern`) counts as a mask. With masks and flex available, flex
comes before ``linear``: its block mask skips whole blocks, where the fused path would
need the dense mask. The decision never reads the encoding's name, only what it declares,
nor the machine it runs on: ``blocks`` comes before ``linear`` because it runs the floor's
own kernel at the floor's own head width, so its ratio to plain attention carries from one
vector ISA to the next, where the fused path's wider heads cost 1.2x on AVX2 and 2-4x on
an AVX-512 Xeon (docs/design-notes.md, "Shift-invariant biases from their distances").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ..base import BiasEncoding
from ..positions import AttnPositions
from .backends import BACKENDS, FLEX_MIN_SCORES, AttnShape, check_flex, explicit_runner, flex_pays
from .flash_blocks import bias_flash_available
from .linear_bias import MAX_WIDTH_RATIO, SMALL_Q, linear_bias_blocks, linear_bias_runs
from .pattern import PLAIN_TRAITS, ScoreTraits

__all__ = [
    "BACKENDS",
    "FLEX_MIN_SCORES",
    "AttnShape",
    "BiasPlan",
    "bias_memory",
    "plan_bias",
    "shares_table",
]

Runner = Literal["scores", "shaw", "math", "linear", "blocks", "rows", "flex", "flash", "sdpa"]


@dataclass(frozen=True)
class BiasPlan:
    """How one attention call runs its bias.

    Attributes:
        runner: the backend (see the module's table).
        table: the bias table the runner needs when the caller gives none: ``"full"``
            (``encoding.bias(q_positions, k_positions)``) or None (the runner computes the
            bias per score, or from its ``2L - 1`` distances).
        slopes: the ``linear`` runner's slopes per head.
        blocks: the ``linear`` runner's centring blocks per head (None: it chooses).
    """

    runner: Runner
    table: Literal["full"] | None = None
    slopes: list[float] | None = None
    blocks: list[int] | None = None


def plan_bias(
    encoding: BiasEncoding,
    shape: AttnShape,
    positions: AttnPositions,
    *,
    masked: bool,
    causal: bool,
    needs_grad: bool,
    device: torch.device,
    backend: str = "auto",
    traits: ScoreTraits = PLAIN_TRAITS,
    table_given: bool = False,
) -> BiasPlan:
    """The backend for ``encoding``'s attention over these inputs.

    Args:
        encoding: a bias encoding.
        shape: the sizes of q and k.
        positions: the queries' and keys' positions (explicit ones may be read, once).
        masked: whether padding or segment masks are given.
        causal: whether keys after their query are masked.
        needs_grad: whether a backward will run (q, k, v, the encoding's parameters or a
            given table require grad).
        device: where the inputs are.
        backend: one of :data:`BACKENDS` (checked by :func:`posenc.attention`).
        traits: the call's window or chunk (taken as a mask), softcap and sinks (only
            ``math`` and ``flex`` run them; sinks ``math`` alone), and whether its keys and
            values are finite (else only ``math`` keeps a masked slot out of every output:
            :mod:`~posenc.attn.explicit`).
        table_given: whether the caller hands the bias table (a model sharing one across
            its layers): the runners that take one are then preferred to ``rows``, which
            would compute it again per layer.

    Raises:
        ValueError: for a backend that cannot run this encoding or these inputs.
    """
    compiling = torch.compiler.is_compiling()
    cpu_training = device.type == "cpu" and needs_grad
    masked = masked or traits.pattern.local
    if encoding.needs_scores:  # CoPE: each row's scores, explicitly, by blocks of rows
        if backend not in ("auto", "math"):
            raise ValueError(
                f"{encoding.info.name!r}'s bias depends on each row's scores before the "
                "softmax: only backend='auto' or 'math' run it"
            )
        return BiasPlan("scores")
    if encoding.adds_to_values and backend not in ("auto", "math"):
        raise ValueError(f"{encoding.info.name!r} adds to the values: only backend='math' runs it")
    explicit = explicit_runner(shape, device, backend, needs_grad, traits)
    if explicit == "flex" and encoding.adds_to_values:  # flex has no value term
        explicit = "math"
    if explicit is not None:
        return BiasPlan(explicit, table="full" if explicit == "math" else None)
    shaw = backend == "auto" and device.type == "cpu" and not masked and not compiling
    shaw = shaw and shape.q_len == shape.k_len and encoding.relative_tables() is not None
    if shaw and (not causal or positions.index_ordered()):
        return BiasPlan("shaw")
    if encoding.adds_to_values:
        return BiasPlan("math", table="full")
    if backend == "flex":
        check_flex(cpu_training)
        return BiasPlan("flex")
    if backend != "auto":
        return BiasPlan("math" if backend == "math" else "sdpa", table="full")
    # the CPU flash kernel over blocks of queries, each with its own rows of the bias
    blockwise = (
        device.type == "cpu"
        and not masked
        and shape.q_len == shape.k_len
        and not compiling
        and bias_flash_available()
    )
    if blockwise and encoding.shift_invariant and not positions.explicit:
        return BiasPlan("blocks")
    by_rows = not table_given and not encoding.needs_q and encoding.linear_slopes(causal) is None
    by_rows = by_rows and blockwise and positions.q.dim() == 1  # one bias for the batch
    if by_rows and (not causal or positions.index_ordered()):
        return BiasPlan("rows")
    flex = flex_pays(shape, device, cpu_training)
    if not (masked and flex) and device.type == "cpu" and not compiling:
        linear = _linear_plan(encoding, shape, positions, causal)
        if linear is not None:
            return linear
    if flex:
        return BiasPlan("flex")
    if cpu_training and not compiling and bias_flash_available():
        return BiasPlan("flash", table="full")
    return BiasPlan("sdpa", table="full")


def _linear_plan(
    encoding: BiasEncoding, shape: AttnShape, positions: AttnPositions, causal: bool
) -> BiasPlan | None:
    """The fused linear-bias plan where it applies: slopes for these inputs, and (from
    ``SMALL_Q`` queries) centring coordinates that cost at most ``MAX_WIDTH_RATIO`` times
    the plain head width; else None."""
    slopes = encoding.linear_slopes(causal)
    if slopes is None:
        return None
    if shape.q_len < SMALL_Q:
        return BiasPlan("linear", slopes=slopes)
    low, high = positions.q_range()
    blocks = linear_bias_blocks(slopes, high - low + 1)
    d = shape.head_dim
    runs = linear_bias_runs(blocks, shape.heads // shape.kv_heads, d)
    if sum(len(kv) * (d + n) for kv, n in runs) > MAX_WIDTH_RATIO * shape.kv_heads * d:
        return None
    return BiasPlan("linear", slopes=slopes, blocks=blocks)


def shares_table(
    encoding: BiasEncoding, *, training: bool, cached: bool, device: torch.device
) -> bool:
    """Whether a model computes its layers' bias table once per forward and hands it to
    every layer (``bias=`` of :func:`posenc.attention`), where :func:`plan_bias` runs them on
    a materialised one (``BiasPlan.table``): when it trains on the CPU without a KV cache
    and the bias depends on the positions alone (not on ``q``: ``needs_q``). The layers then
    neither recompute it (FIRE's MLP, T5's buckets) nor keep copies of it, and one backward
    through it reaches the encoding's parameters."""
    return training and not cached and device.type == "cpu" and not encoding.needs_q


def bias_memory(cls: type[BiasEncoding]) -> str:
    """What a bias encoding of class ``cls`` holds beyond q, k and v on the runners
    :func:`plan_bias` gives it (``L`` the length, ``H`` the heads), from the capabilities
    the class declares."""

    def declares(name: str) -> bool:
        return getattr(cls, name) is not getattr(BiasEncoding, name)

    if declares("needs_scores"):  # CoPE: by blocks of rows, recomputed in the backward
        return "[H, B, L] scores per block of B rows"
    if declares("needs_input"):  # FoX: its clock rides in extra key coordinates
        return "[B, H, L] clock; k, v per head, 8 columns wider"
    if declares("adds_to_values"):
        return "[H, L, L] scores, or [H, 64, L] blocks (CPU)"
    if declares("shift_invariant"):
        return "[H, 2L - 1] distances (CPU), or none (flex, fused ALiBi)"
    if declares("linear_slopes"):
        return "[H, L, L] bias, or none (fused ALiBi path)"
    return "[H, L, L] bias, or none (flex)"
