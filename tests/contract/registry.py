"""The registry of valid calls, one per public callable, where :mod:`test_contract` starts.

An :class:`Example` builds its call afresh each time (a cache or a model a probe changed is
never reused), and says which wrong values are documented valid results for a parameter
(``ok``, with the reason in a comment beside it), which probes do not apply (``skip``), and
the other names an error may use for a parameter (``alias``: ``cos and sin``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

import posenc

#: the modules whose ``__all__`` is the public surface
MODULES = (
    "posenc",
    "posenc.functional",
    "posenc.models",
    "posenc.hf",
    "posenc.engines",
    "posenc.positions",
)

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Call:
    return fn, args, kwargs


@dataclasses.dataclass(frozen=True)
class Example:
    """A valid call (``make()`` -> ``(fn, args, kwargs)``) and what its probes expect."""

    make: Callable[[], Call]
    ok: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    skip: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    alias: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def bind(self) -> tuple[Callable[..., Any], inspect.BoundArguments]:
        fn, args, kwargs = self.make()
        return fn, inspect.signature(fn).bind(*args, **kwargs)

    def parameters(self) -> Iterator[tuple[str, Any, Any]]:
        """``(name, valid value, default)`` of each parameter the call binds by name."""
        fn, bound = self.bind()
        signature = inspect.signature(fn)
        for name, value in bound.arguments.items():
            parameter = signature.parameters[name]
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            default = None if parameter.default is parameter.empty else parameter.default
            yield name, value, (0 if parameter.default is parameter.empty else default)

    def aliases(self, param: str) -> tuple[str, ...]:
        return self.alias.get(param, ())


def _methods(prefix: str, cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            yield f"{prefix}.{name}", member


def public_callables() -> dict[str, Callable[..., Any]]:
    """Every public callable by the first name it is reached by: the modules' ``__all__``
    (functions, classes, the classes' public methods), then the public methods each
    registered encoding's class defines (``posenc.<kind>.<module>.<Class>.<method>``)."""
    found: dict[str, Callable[..., Any]] = {}
    seen: set[int] = set()

    def add(name: str, obj: Callable[..., Any]) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            found[name] = obj

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not callable(obj):
                continue
            add(f"{module_name}.{name}", obj)
            if inspect.isclass(obj):
                for method_name, method in _methods(f"{module_name}.{name}", obj):
                    add(method_name, method)
    for encoding in posenc.available():
        for cls in posenc.registry.get(encoding).__mro__:
            if cls.__module__.startswith("posenc."):
                for method_name, method in _methods(f"{cls.__module__}.{cls.__qualname__}", cls):
                    add(method_name, method)
    return found


EXAMPLES: dict[str, Example] = {}
#: public callables with parameters that take no probes, each with its reason
EXEMPT: dict[str, str] = {}


def example(name: str, make: Callable[[], Call], **expect: Any) -> None:
    EXAMPLES[name] = Example(make, **expect)


# the sizes and inputs every area's examples share
B, H, S, D = 2, 2, 4, 8
#: positions out of order, so a result that ignored them would differ
P = torch.tensor([0, 3, 1, 2])
CPU = torch.device("cpu")
#: a label names the argument in messages: an unknown string is still a label
LABEL = ("choice",)


def gen(*shape: int, seed: int = 0) -> torch.Tensor:
    """A seeded normal tensor of ``shape``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def heads(seed: int = 0, d: int = D) -> torch.Tensor:
    """Queries or keys ``[B, H, S, d]``."""
    return gen(B, H, S, d, seed=seed)
