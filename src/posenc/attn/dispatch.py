"""Running an attention call: :func:`plan_of` decides its runner once per encoding,
shapes, flags and device (:func:`~posenc.attn.planner.plan`, kept), and :func:`run` runs
it, FoX's clock riding in extra key coordinates of a plain call where the plan says so."""

from __future__ import annotations

import itertools
from functools import partial
from typing import TYPE_CHECKING

import torch

from ..base.bias import UNCHANGED
from ..host_reads import checked
from .call import AttnShape, Call, ScoreTraits
from .forget import forget_call
from .planner import Plan, plan, plan_shape
from .runners import RUNNERS

if TYPE_CHECKING:
    from ..base import BiasEncoding
    from ..positions import AttnPositions

__all__ = ["PLAIN_PLANS_MAX", "plan_of", "run", "run_within"]


def run(call: Call) -> torch.Tensor:
    """``call`` on the runner :func:`plan` picks (:data:`~posenc.attn.runners.RUNNERS`);
    FoX's clock, unless the plan materialises its bias, rides in extra key coordinates of a
    plain call (:func:`~posenc.attn.forget.forget_call`).

    Shapes:
        -> ``[batch, heads, q_len, v's head_dim]`` in the dtype of ``q``.
    """
    if torch.compiler.is_compiling():
        return run_within(call)
    # the call's positions were checked: a runner's bias reads none of their values again;
    # no encoding changes during the call: its state is compared once (derived values)
    with checked(), UNCHANGED:
        return run_within(call)


def run_within(call: Call) -> torch.Tensor:
    """:func:`run` of a call made inside blocks that hold for it already: a model's
    forward, whose :func:`~posenc.host_reads.checked` and
    :data:`~posenc.base.bias.UNCHANGED` blocks span every layer (entered once per forward,
    not once per layer).

    Shapes:
        as :func:`run`.
    """
    chosen = plan_of(call)
    if chosen.forget:
        out = RUNNERS[chosen.runner](forget_call(call), chosen)
        return out[..., : call.q.shape[-1]].to(call.q.dtype)
    return RUNNERS[chosen.runner](call, chosen)


def plan_of(call: Call) -> Plan:
    """:func:`plan` of a checked call; a backward will run when grad mode is on and an
    input, a sink, the table or a parameter of the encoding requires grad.

    Decided once per encoding, shapes (:func:`~posenc.attn.planner.plan_shape`: the key
    length only as the plan reads it), flags and device: a call with no backward over the
    default positions (whose facts follow from the lengths) takes the plan of the first
    such call, kept with the encoding (:meth:`~posenc.base.BiasEncoding.derived`: a new
    config or parameters decide again) or, for plain attention, in :data:`_PLAIN_PLANS`.
    Nothing is kept while ``torch.compile`` traces."""
    context, enc, q = call.context, call.encoding, call.q
    grad = torch.is_grad_enabled() and _requires_grad(call)
    # plan's flags, in its order: masked, causal, device, backend, traits, table_given
    flags = (
        context.masks is not None,
        call.causal,
        q.device,
        call.backend,
        call.options.traits(call.finite),
        call.table is not None,
    )
    shape = AttnShape.of(q, call.k)
    decide = partial(_decide, enc, shape, context.positions, grad, flags)
    if grad or context.positions.explicit or torch.compiler.is_compiling():
        return decide()
    key = (plan_shape(shape), *flags)
    if enc is not None:
        return enc.derived(("plan", key), decide)
    chosen = _PLAIN_PLANS.get(key)
    if chosen is None:
        if len(_PLAIN_PLANS) >= PLAIN_PLANS_MAX:
            _PLAIN_PLANS.popitem()  # one atomic step: safe across threads
        chosen = _PLAIN_PLANS[key] = decide()
    return chosen


def _decide(
    enc: BiasEncoding | None,
    shape: AttnShape,
    positions: AttnPositions,
    grad: bool,
    flags: tuple[bool, bool, torch.device, str, ScoreTraits, bool],
) -> Plan:
    """:func:`plan` of :func:`plan_of`'s flags (a tuple: the key it keeps plans under)."""
    masked, causal, device, backend, traits, table_given = flags
    return plan(
        enc,
        shape,
        positions,
        needs_grad=grad,
        masked=masked,
        causal=causal,
        device=device,
        backend=backend,
        traits=traits,
        table_given=table_given,
    )


def _requires_grad(call: Call) -> bool:
    enc, tensors = call.encoding, (call.q, call.k, call.v, call.options.sinks, call.table)
    params = () if enc is None else enc.parameters()  # walked only if no tensor requires it
    return any(t is not None and t.requires_grad for t in itertools.chain(tensors, params))


#: plain attention's plans by what decides them (:func:`plan_of`); once full, the latest
#: kept one makes room
_PLAIN_PLANS: dict[tuple, Plan] = {}
#: the most plans :data:`_PLAIN_PLANS` keeps
PLAIN_PLANS_MAX = 64
