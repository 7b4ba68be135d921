"""Calling a block's torch layers with less host work: a layer that calling would only run
(no hooks, torch's own class) runs its functional op directly.

``nn.Module.__call__`` costs about 2 µs on the host before the forward starts (its hook
dispatch), and a one-token forward of a small model makes 40 such calls, a tenth of its
host time. Where the call would do nothing but the forward, :func:`norm`, :func:`linear`
and :func:`mlp` run the same op on the same weights (bit-equal: the op the module's
forward runs); a layer with a hook of its own or a global one, or one replaced by another
class (a LoRA wrapper, a quantised linear), is called as a module, so it still sees every
call.

Shapes:
    x: ``[..., in]`` -> ``[..., out]`` (the layer's widths).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from .activation import GELU, gelu

__all__ = ["call", "forward_of", "layers_of", "linear", "mlp", "norm", "plain"]

#: the global hooks ``nn.Module.__call__`` runs for every module (torch 2.x names; a
#: missing one counts as empty)
_FORWARD_PRE, _FORWARD, _BACKWARD_PRE, _BACKWARD = (
    getattr(_module, name, {})
    for name in (
        "_global_forward_pre_hooks",
        "_global_forward_hooks",
        "_global_backward_pre_hooks",
        "_global_backward_hooks",
    )
)


#: each GELU class's functional op
_GELUS: dict[type[nn.Module], Callable[..., torch.Tensor]] = {nn.GELU: F.gelu, GELU: gelu}


def plain(layer: nn.Module) -> bool:
    """Whether calling ``layer`` would run its ``forward`` and nothing else: no hook of its
    own, no global one, not compiled on its own (``layer.compile()``), not under
    ``torch.jit.trace`` (which records module calls).

    Example:
        >>> layer = nn.Linear(2, 2)
        >>> plain(layer)
        True
        >>> handle = layer.register_forward_hook(lambda *args: None)
        >>> plain(layer)
        False
    """
    return not (
        layer._compiled_call_impl is not None
        or layer._forward_hooks
        or layer._forward_pre_hooks
        or layer._backward_hooks
        or layer._backward_pre_hooks
        or _FORWARD_PRE
        or _FORWARD
        or _BACKWARD_PRE
        or _BACKWARD
        or torch._C._get_tracing_state()
    )


def layers_of(module: nn.Module) -> dict[str, nn.Module]:
    """``module``'s registered submodules by name, as ``module.name`` gives them (the
    current ones: a layer replaced by assignment is there) without
    ``nn.Module.__getattr__``, which costs about 0.5 µs an access.

    Example:
        >>> block = nn.Sequential(nn.Linear(2, 2))
        >>> layers_of(block)["0"] is block[0]
        True
    """
    return cast("dict[str, nn.Module]", module._modules)  # a string: no alias built per call


def norm(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``; an ``nn.RMSNorm`` as ``F.rms_norm`` where :func:`plain`.

    Shapes:
        x: ``[..., dim]`` -> the same.
    """
    if type(layer) is nn.RMSNorm and plain(layer):
        weight = layer._parameters["weight"]  # as layer.weight, without Module.__getattr__
        return F.rms_norm(x, layer.normalized_shape, weight, layer.eps)
    return layer(x)


def linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``; an ``nn.Linear`` as ``F.linear`` where :func:`plain`.

    Shapes:
        x: ``[..., in_features]`` -> ``[..., out_features]``.
    """
    if type(layer) is nn.Linear and plain(layer):
        params = layer._parameters  # as layer.weight, layer.bias, without Module.__getattr__
        return F.linear(x, cast(torch.Tensor, params["weight"]), params["bias"])
    return layer(x)


def mlp(layers: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layers(x)``; an ``nn.Sequential`` of a linear, a GELU (torch's, or the block's
    :class:`~posenc.models.activation.GELU`) and a linear (the block's MLP) as their
    functional ops where each is :func:`plain`.

    Shapes:
        x: ``[..., dim]`` -> ``[..., dim]``.
    """
    children = tuple(layers_of(layers).values())
    if type(layers) is not nn.Sequential or len(children) != 3 or not plain(layers):
        return layers(x)
    up, act, down = children  # [dim -> hidden], its activation, [hidden -> dim]
    gelu_of = _GELUS.get(type(act))
    if gelu_of is not None and plain(act):
        hidden = gelu_of(linear(up, x), approximate=cast(nn.GELU, act).approximate)
    else:
        hidden = act(linear(up, x))
    return linear(down, hidden)


def call(module: nn.Module, /, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)``, as ``module.forward(...)`` where :func:`plain` (and
    its class calls as ``nn.Module`` does)."""
    return forward_of(module)(*args, **kwargs)


def forward_of(module: nn.Module) -> Callable[..., Any]:
    """What :func:`call` calls: ``module.forward`` where :func:`plain` (and its class
    calls as ``nn.Module`` does), else ``module``. A caller with many keywords calls it
    directly (``forward_of(m)(x, a=...)``), passing them once instead of twice.

    Example:
        >>> layer = nn.Identity()
        >>> forward_of(layer) == layer.forward
        True
    """
    if type(module).__call__ is nn.Module.__call__ and plain(module):
        return module.forward
    return module
