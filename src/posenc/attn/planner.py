"""The one place that decides which runner computes an attention call.

:func:`plan` reads what decides it (the encoding's capabilities, the shapes, the masks,
whether gradients are needed, the device, the backend asked for, the call's softcap and
sinks and whether its inputs are finite) and returns a :class:`Plan`: the runner's name
in :data:`~posenc.attn.runners.RUNNERS` and what it needs. :func:`posenc.attention` runs it;
:class:`~posenc.models.TransformerLM` asks it whether its layers run on a materialised
bias, which it then computes once for all of them (where :func:`shares_table`); ``posenc
list`` asks what an encoding holds in memory (:func:`bias_memory`).

``auto`` takes the first row of :data:`ROWS` that answers, top to bottom (``bias``: an
encoding that adds to the scores; ``plain``: none, a rotary encoding's rotated q and k,
or FoX's clock riding in extra key coordinates, :mod:`posenc.attn.forget`):

============  ====  ============================================================
runner        for   where
============  ====  ============================================================
``weights``   bias  the weights are not a softmax (stick-breaking): written out by
                    blocks of rows; causal only
``path``      bias  the scores pass through transforms of the layer's input (PaTH):
                    by blocks of rows; causal, the queries the last of the keys
``scores``    bias  the bias reads each row's scores (CoPE): blockwise explicit softmax
``math``      FoX   inputs not finite, ``backend="math"``, softcap or sinks: the
                    forget bias materialised
``math`` or   all   inputs not finite (``math``, which keeps a hidden slot's NaN out);
``flex``            softcap or sinks (``flex`` at inference where it pays, never sinks)
``shaw``      bias  Shaw's clipped tables on the CPU, ``q_len == k_len >=``
                    :data:`BLOCKWISE_MIN`, no masks, keys in index order (or not
                    causal), not compiling
``math``      bias  the encoding adds to the values (Shaw's values)
``flex``      all   asked for (not training on the CPU)
``math``      all   asked for
``sdpa``      bias  asked for: SDPA with the materialised bias
``flex``      plain a window or chunk where flex pays: ``O(L·W)``
``fast``      plain default positions, no masks, one query or as many as keys: SDPA's
                    own causal mask
``sdpa``      plain everything else: SDPA with the dense mask
``distance``  bias  the CPU, a shift-invariant bias (ALiBi, T5, KERPLE) over default
                    positions, ``q_len == k_len >=`` :data:`BLOCKWISE_MIN`, no masks,
                    not compiling
``rows``      bias  the CPU, a bias of the positions alone (FIRE), no table given,
                    ``[len]`` positions, ``q_len == k_len >=`` :data:`BLOCKWISE_MIN`,
                    keys in index order (or not causal), no masks
``linear``    bias  linear slopes (ALiBi) on the CPU, centring coordinates within
                    ``MAX_WIDTH_RATIO`` (after ``flex`` when masked and flex pays)
``flex``      bias  :data:`FLEX_MIN_SCORES` scores per head or more where flex runs,
                    not training on the CPU
``flash``     bias  training on the CPU: the flash kernel with a blockwise backward
``sdpa``      bias  everything else: SDPA with the materialised bias
============  ====  ============================================================

A window or chunk counts as a mask. The decision never reads the encoding's name, only
what it declares, nor the machine it runs on: ``distance`` comes before ``linear``
because it runs the floor's own kernel at the floor's own head width, so its ratio to
plain attention carries from one vector ISA to the next (docs/design-notes.md,
"Shift-invariant biases from their distances").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..base import (
    BiasEncoding,
    InputBias,
    InputTransforms,
    LinearSlopes,
    RelativeTables,
    ScoreBias,
    ScoreWeights,
    ShiftInvariant,
)
from ..positions import AttnPositions
from .call import PLAIN, PLAIN_TRAITS, AttnShape, ScoreOptions, ScoreTraits
from .checks import BACKENDS, check_flex
from .kernels.flash_blocks import bias_flash_available
from .plans import BiasPlan, Plan, Runner
from .runners.flex import flex_available
from .runners.linear import MAX_WIDTH_RATIO, SMALL_Q, linear_bias_blocks, linear_bias_runs

__all__ = [
    "BACKENDS",
    "BLOCKWISE_MIN",
    "FLEX_MIN_SCORES",
    "PLAIN",
    "PLAIN_TRAITS",
    "ROWS",
    "AttnShape",
    "BiasPlan",
    "Plan",
    "ScoreOptions",
    "ScoreTraits",
    "plan",
    "plan_bias",
    "plan_shape",
    "shares_table",
]


#: the number of scores per head (q_len * k_len) from which ``auto`` uses flex attention
FLEX_MIN_SCORES = 256 * 256
#: the fewest queries the blockwise CPU runners (``distance``, ``rows``, ``shaw``) take: one
#: query over one key (a model's forward of one token) costs their set-up (the distance
#: values, their flush, the reversed queries) for one score, where one SDPA call with the
#: bias takes it (ALiBi's: the ``linear`` runner's row of a kept table)
BLOCKWISE_MIN = 2


@dataclass(frozen=True)
class Facts:
    """What :func:`plan` decides by, with what the rows derive from it."""

    encoding: BiasEncoding | None
    shape: AttnShape
    positions: AttnPositions
    masked: bool  # padding or segments, or a window or chunk
    causal: bool
    needs_grad: bool
    device: torch.device
    backend: str
    traits: ScoreTraits
    table_given: bool
    #: the bias's slopes where it is linear in the distance (:class:`LinearSlopes`), read
    #: once for the rows that ask
    slopes: list[float] | None

    @property
    def bias(self) -> BiasEncoding | None:
        """The encoding whose bias the runner computes (None: plain attention; FoX's rides
        in the keys)."""
        enc = self.encoding
        return None if enc is None or isinstance(enc, InputBias) else enc

    @property
    def cpu(self) -> bool:
        return self.device.type == "cpu" and not torch.compiler.is_compiling()

    @property
    def cpu_training(self) -> bool:
        return self.device.type == "cpu" and self.needs_grad

    @property
    def flex_pays(self) -> bool:
        """Large enough for flex, where it runs and has a backward."""
        big = self.shape.q_len * self.shape.k_len >= FLEX_MIN_SCORES
        return not self.cpu_training and big and flex_available(self.device) and self.flex_grad

    @property
    def flex_grad(self) -> bool:
        """No backward, or one that flex attention can take through the score_mod."""
        return not self.needs_grad or self.bias is None or self.bias.flex_backward

    @property
    def square(self) -> bool:
        """A CPU call of as many queries as keys, at least :data:`BLOCKWISE_MIN`, and no
        masks: the blockwise kernels'."""
        s = self.shape
        return self.cpu and not self.masked and s.q_len == s.k_len >= BLOCKWISE_MIN

    @property
    def in_order(self) -> bool:
        """Keys in index order, or no causal mask: the blockwise kernels' causal part."""
        return not self.causal or self.positions.index_ordered()

    def full(self, runner: Runner) -> Plan:
        """``runner`` on the materialised bias (none for plain attention)."""
        return Plan(runner, table=None if self.bias is None else "full")


def _weights(f: Facts) -> Plan | None:
    if not isinstance(f.encoding, ScoreWeights):
        return None
    runs_alone(f, "breaks a stick from each query's nearest key back, in place of a softmax")
    if f.traits.sinks:
        raise ValueError(f"{f.encoding.info.name!r}'s weights are no softmax: a sink has no row")
    return Plan("weights")


def _path(f: Facts) -> Plan | None:
    if not isinstance(f.encoding, InputTransforms):
        return None
    runs_alone(
        f, "passes each score through the transforms of the tokens between its key and query"
    )
    return Plan("path")


def runs_alone(f: Facts, what: str) -> None:
    """Refuse, naming it, what an encoding that only its own runner computes (``what`` it
    does) cannot run: a backend other than ``auto`` or ``math``, ``causal=False``, more
    queries than keys (the queries are the last of the keys' tokens)."""
    name, s = f.encoding.info.name, f.shape  # type: ignore[union-attr]
    if f.backend not in ("auto", "math"):
        raise ValueError(
            f"{name!r} {what}, which only its own runner computes: backend must be 'auto' or "
            f"'math', got {f.backend!r}"
        )
    if not f.causal:
        raise ValueError(f"{name!r} {what}: it defines causal attention only (causal=True)")
    if s.q_len > s.k_len:
        raise ValueError(
            f"{name!r} {what}: the queries must be the last of the keys' tokens, but q has "
            f"{s.q_len} and k {s.k_len}"
        )


def _scores(f: Facts) -> Plan | None:
    enc = f.bias
    if not isinstance(enc, ScoreBias):
        return None
    if f.backend not in ("auto", "math"):
        raise ValueError(
            f"{enc.info.name!r}'s bias depends on each row's scores before the softmax: "
            "only backend='auto' or 'math' run it"
        )
    return Plan("scores")


def _forget_materialised(f: Facts) -> Plan | None:
    enc = f.encoding
    if not isinstance(enc, InputBias):
        return None
    if not f.causal:
        raise ValueError(
            f"{enc.info.name}'s forget gates decay the past: it defines no bias for later "
            "keys, so it runs causal attention only (causal=True)"
        )
    if f.traits.finite and f.backend != "math" and not f.traits.modified:
        return None  # the clock rides in extra key coordinates: the plain rows
    return Plan("math", table="full")


def _explicit(f: Facts) -> Plan | None:
    """``math`` for inputs that are not finite; softcap or sinks on ``math`` or ``flex``."""
    enc = f.bias
    values = isinstance(enc, RelativeTables) and enc.adds_to_values
    if enc is not None and values and f.backend not in ("auto", "math"):
        raise ValueError(f"{enc.info.name!r} adds to the values: only backend='math' runs it")
    if not f.traits.finite:
        return f.full("math")
    if not f.traits.modified:
        return None
    if f.backend == "sdpa":
        raise ValueError(
            "softcap and sinks change the scores before the softmax, which SDPA cannot: "
            "use backend='auto', 'math' or 'flex'"
        )
    if f.backend == "flex" and not values:
        check_flex(f.cpu_training, f.bias if not f.flex_grad else None)
        if f.traits.sinks:
            raise ValueError(
                "sinks join the softmax as a logit without a value, which flex attention has "
                "no hook for: use backend='auto' or 'math'"
            )
        return Plan("flex")
    if f.backend == "auto" and not f.traits.sinks and not values and f.flex_pays:
        return Plan("flex")
    return f.full("math")


def _shaw(f: Facts) -> Plan | None:
    tables = isinstance(f.bias, RelativeTables) and f.backend == "auto"
    return Plan("shaw") if tables and f.square and f.in_order else None


def _values(f: Facts) -> Plan | None:
    values = isinstance(f.bias, RelativeTables) and f.bias.adds_to_values
    return f.full("math") if values else None


def _asked(f: Facts) -> Plan | None:
    """The backend the caller named: ``flex``, ``math``, or ``sdpa`` with a bias."""
    if f.backend == "flex":
        check_flex(f.cpu_training, f.bias if not f.flex_grad else None)
        return Plan("flex")
    if f.backend == "math" or (f.backend == "sdpa" and f.bias is not None):
        return f.full(f.backend)  # type: ignore[arg-type]
    return None


def _plain_flex(f: Facts) -> Plan | None:
    plain = f.bias is None and f.backend == "auto"
    return Plan("flex") if plain and f.traits.pattern.local and f.flex_pays else None


def _fast(f: Facts) -> Plan | None:
    default = not f.masked and not f.positions.explicit
    if f.bias is None and default and f.shape.q_len in (1, f.shape.k_len):
        return Plan("fast")
    return None


def _plain_sdpa(f: Facts) -> Plan | None:
    return Plan("sdpa") if f.bias is None else None


def _distance(f: Facts) -> Plan | None:
    enc = f.bias
    invariant = isinstance(enc, ShiftInvariant) and not f.positions.explicit
    return Plan("distance") if invariant and f.square and bias_flash_available() else None


def _rows(f: Facts) -> Plan | None:
    enc = f.bias
    if enc is None or f.table_given or enc.needs_q or f.slopes is not None:
        return None
    one = f.positions.q.dim() == 1  # one bias for the batch
    return Plan("rows") if one and f.square and f.in_order and bias_flash_available() else None


def _linear(f: Facts) -> Plan | None:
    """The fused linear-bias plan where it applies: slopes for these inputs, and (from
    ``SMALL_Q`` queries) centring coordinates that cost at most ``MAX_WIDTH_RATIO`` times
    the plain head width."""
    if not f.cpu or (f.masked and f.flex_pays):
        return None
    slopes = f.slopes
    if slopes is None:
        return None
    if f.shape.q_len < SMALL_Q:
        return Plan("linear", slopes=slopes)
    low, high = f.positions.q_range()
    blocks = linear_bias_blocks(slopes, high - low + 1)
    s = f.shape
    runs = linear_bias_runs(blocks, s.heads // s.kv_heads, s.head_dim)
    if (
        sum(len(kv) * (s.head_dim + n) for kv, n in runs)
        > MAX_WIDTH_RATIO * s.kv_heads * s.head_dim
    ):
        return None
    return Plan("linear", slopes=slopes, blocks=blocks)


def _bias_flex(f: Facts) -> Plan | None:
    return Plan("flex") if f.bias is not None and f.flex_pays else None


def _flash(f: Facts) -> Plan | None:
    train = f.bias is not None and f.cpu_training and not torch.compiler.is_compiling()
    return Plan("flash", table="full") if train and bias_flash_available() else None


def _bias_sdpa(f: Facts) -> Plan | None:
    return Plan("sdpa", table="full")


def plan_shape(shape: AttnShape) -> tuple[int | bool, ...]:
    """What :func:`plan` reads of ``shape`` (the key :func:`~posenc.attn.dispatch.plan_of`
    keeps a plan under): every size but the key length, of which the rows read only how it
    compares with the query length and whether the scores reach :data:`FLEX_MIN_SCORES`.
    So decode steps, whose keys grow by one, share one plan. A row that reads the key
    length in another way adds it here."""
    q, k = shape.q_len, shape.k_len
    return (*shape[:4], min(k, q + 1), q * k >= FLEX_MIN_SCORES, shape.head_dim)


#: the rows :func:`plan` reads, top to bottom: the first that answers runs the call (the
#: module's table says when each does)
ROWS: tuple[Callable[[Facts], Plan | None], ...] = (
    _weights,
    _path,
    _scores,
    _forget_materialised,
    _explicit,
    _shaw,
    _values,
    _asked,
    _plain_flex,
    _fast,
    _plain_sdpa,
    _distance,
    _rows,
    _linear,
    _bias_flex,
    _flash,
    _bias_sdpa,
)


def plan(
    encoding: BiasEncoding | None,
    shape: AttnShape,
    positions: AttnPositions,
    *,
    masked: bool,
    causal: bool = True,
    needs_grad: bool,
    device: torch.device,
    backend: str = "auto",
    traits: ScoreTraits | None = None,
    table_given: bool = False,
) -> Plan:
    """The runner for an attention call over these inputs: the first of :data:`ROWS` that
    answers.

    Args:
        encoding: a bias encoding, or None (no encoding, a rotary one's q and k).
        shape: the sizes of q and k.
        positions: the queries' and keys' positions (explicit ones may be read, once).
        masked: whether padding or segment masks are given.
        causal: whether keys after their query are masked.
        needs_grad: whether a backward will run (q, k, v, the encoding's parameters or a
            given table require grad).
        device: where the inputs are.
        backend: one of :data:`BACKENDS` (checked by :func:`posenc.attention`).
        traits: the call's window or chunk (taken as a mask), softcap and sinks, and
            whether its inputs are finite.
        table_given: whether the caller hands the bias table (a model sharing one across
            its layers): the runners that take one are then preferred to ``rows``, which
            would compute it again per layer.

    Raises:
        ValueError: for a backend that cannot run this encoding or these inputs.
    """
    traits = PLAIN_TRAITS if traits is None else traits  # not a default: dynamo 2.11
    masked = masked or traits.pattern.local
    # the slopes serve the CPU rows only: nowhere else are they read
    cpu = device.type == "cpu" and not torch.compiler.is_compiling()
    slopes = encoding.linear_slopes(causal) if isinstance(encoding, LinearSlopes) and cpu else None
    facts = Facts(
        encoding,
        shape,
        positions,
        masked,
        causal,
        needs_grad,
        device,
        backend,
        traits,
        table_given,
        slopes,
    )
    for row in ROWS:
        chosen = row(facts)
        if chosen is not None:
            forget = isinstance(encoding, InputBias) and chosen.table is None
            return replace(chosen, forget=True) if forget else chosen
    raise AssertionError("the last row answers every call")  # pragma: no cover


#: the name of :func:`plan` before plain attention shared it
plan_bias = plan


def shares_table(
    encoding: BiasEncoding, *, training: bool, cached: bool, device: torch.device
) -> bool:
    """Whether a model computes its layers' bias table once per forward and hands it to
    every layer (``bias=`` of :func:`posenc.attention`), where :func:`plan` runs them on a
    materialised one (``Plan.table``): when it trains on the CPU without a KV cache and the
    bias depends on the positions alone (not on ``q``: ``needs_q``). The layers then
    neither recompute it (FIRE's MLP, T5's buckets) nor keep copies of it, and one backward
    through it reaches the encoding's parameters."""
    return training and not cached and device.type == "cpu" and not encoding.needs_q
