"""What every choice of an attention backend shares, and the choice for attention without
a bias.

:func:`~posenc.attn.bias_plan.plan_bias` (bias encodings) and :func:`plan_plain` (rotary
encodings, ``none``) both read here: the backends a caller may ask for, the sizes of a
call (:class:`AttnShape`), when flex attention pays (:func:`flex_pays`), and which calls
only the explicit softmax (or flex) can run (:func:`explicit_runner`: softcap, sinks,
values that are not all finite).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from ..positions import AttnPositions
from .flex import flex_available
from .pattern import PLAIN_TRAITS, ScoreTraits

__all__ = [
    "BACKENDS",
    "FLEX_MIN_SCORES",
    "AttnShape",
    "check_flex",
    "explicit_runner",
    "flex_pays",
    "plan_plain",
]

#: the backends a caller may ask for
BACKENDS = ("auto", "flex", "sdpa", "math")
#: the number of scores per head (q_len * k_len) from which ``auto`` uses flex attention
FLEX_MIN_SCORES = 256 * 256


class AttnShape(NamedTuple):
    """The sizes of one attention call: q ``[batch, heads, q_len, head_dim]``, k and v
    ``[batch, kv_heads, k_len, head_dim]``."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor) -> AttnShape:
        b, h, q_len, d = q.shape
        return cls(b, h, k.shape[1], q_len, k.shape[2], d)


PlainRunner = Literal["fast", "sdpa", "flex", "math"]


def plan_plain(
    shape: AttnShape,
    positions: AttnPositions,
    *,
    masked: bool,
    needs_grad: bool,
    device: torch.device,
    backend: str = "auto",
    traits: ScoreTraits = PLAIN_TRAITS,
) -> PlainRunner:
    """The backend of attention without a bias (rotary encodings, ``none``): ``fast``
    (SDPA with its own causal mask: default positions, one query or as many as keys, no
    masks, no window or chunk), ``flex`` (where it pays: a window or chunk then costs
    ``O(L·W)``; and softcap or sinks at inference), ``math`` (softcap or sinks otherwise,
    non-finite values) or ``sdpa`` (SDPA with the dense mask). The arguments are those of
    :func:`plan_bias`."""
    explicit = explicit_runner(shape, device, backend, needs_grad, traits)
    if explicit is not None:
        return explicit
    local = traits.pattern.local
    cpu_training = device.type == "cpu" and needs_grad
    if backend == "flex":
        check_flex(cpu_training)
        return "flex"
    if backend == "math":
        return "math"
    if backend == "auto" and local and flex_pays(shape, device, cpu_training):
        return "flex"
    default = not masked and not local and not positions.explicit
    return "fast" if default and shape.q_len in (1, shape.k_len) else "sdpa"


def explicit_runner(
    shape: AttnShape,
    device: torch.device,
    backend: str,
    needs_grad: bool,
    traits: ScoreTraits,
) -> Literal["math", "flex"] | None:
    """``math`` or ``flex`` where only they run the call (softcap or sinks; non-finite
    values: ``math``), else None."""
    if not traits.finite:
        return "math"
    if not traits.modified:
        return None
    sinks = traits.sinks
    if backend == "sdpa":
        raise ValueError(
            "softcap and sinks change the scores before the softmax, which SDPA cannot: "
            "use backend='auto', 'math' or 'flex'"
        )
    cpu_training = device.type == "cpu" and needs_grad
    if backend == "flex":
        check_flex(cpu_training)
        if sinks:
            raise ValueError(
                "sinks join the softmax as a logit without a value, which flex attention has "
                "no hook for: use backend='auto' or 'math'"
            )
        return "flex"
    if backend == "auto" and not sinks and flex_pays(shape, device, cpu_training):
        return "flex"
    return "math"


def flex_pays(shape: AttnShape, device: torch.device, cpu_training: bool) -> bool:
    """Whether ``auto`` takes flex attention: large enough, where it runs and has a
    backward."""
    big = shape.q_len * shape.k_len >= FLEX_MIN_SCORES
    return not cpu_training and big and flex_available(device)


def check_flex(cpu_training: bool) -> None:
    if cpu_training:
        raise ValueError(
            "compiled flex attention has no backward on the CPU: use backend='sdpa' (or "
            "'auto'), or call under torch.no_grad() with inputs that do not require grad"
        )
