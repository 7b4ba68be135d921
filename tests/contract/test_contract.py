"""The input contract, checked structurally: every public callable, every parameter, every
kind of wrong value.

The public surface is walked, not listed: the ``__all__`` of ``posenc``, ``posenc.functional``,
``posenc.models``, ``posenc.hf``, ``posenc.engines`` and ``posenc.positions`` (functions,
classes and the classes' public methods) and the public methods of every registered
encoding's class (:func:`public_callables`). Each needs one valid call in
:data:`tests.contract.examples.EXAMPLES` (or a reason in ``EXEMPT``): a new public callable
without one fails :func:`test_every_public_callable_has_an_example`, so no API lands without
its checks.

For each parameter the valid call binds, each wrong value that fits its kind
(:func:`probes`: None, a string, a bool where a number goes, NaN, inf, a negative, a huge
int, a float where an int goes, a list where a tensor goes, a tensor of the wrong dtype, a
tensor on the meta device, an int where a bool goes, an unknown choice) replaces the valid
one, and the call must either

- raise a ``TypeError`` or ``ValueError`` raised by posenc itself (the innermost frame of
  the traceback is a posenc source file) whose message names the parameter, or
- be a documented valid result: the example lists the probe as accepted (``ok``, each with
  its reason in the example's comment), or, for the meta device, return tensors that are
  all on meta (a shape-only computation, as the conformance suite documents).

Anything else fails: a result where an error was due (silently wrong), or an error from
inside torch, Python or Triton (unclear).
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.contract.examples import EXAMPLES, EXEMPT, Example, public_callables

import posenc

SRC = Path(posenc.__file__).parent

#: a wrong value, by the name the examples use to accept it
Probe = tuple[str, Any]


def probes(valid: Any, default: Any) -> Iterator[Probe]:
    """The wrong values for a parameter whose valid value is ``valid`` (and whose default
    is ``default``): by the kind of ``valid``."""
    if default is not None:
        yield "none", None
    if isinstance(valid, bool):
        yield from (("string", "no"), ("int", 1))
    elif isinstance(valid, int):
        yield from (("string", "3"), ("bool", True), ("float", 1.5), ("nan", math.nan))
        yield from (("negative", -1), ("huge", 2**70))
    elif isinstance(valid, float):
        yield from (("string", "3"), ("bool", True), ("nan", math.nan), ("inf", math.inf))
        yield from (("negative", -1.0), ("huge", 1e300))
    elif isinstance(valid, str):
        yield from (("int", 1), ("choice", "no-such-" + valid))
    elif isinstance(valid, torch.Tensor):
        yield from (("string", "x"), ("list", valid.tolist()))
        wrong = torch.complex64 if not valid.is_complex() else torch.int64
        yield "dtype", valid.to(wrong)
        yield "meta", valid.to("meta")
    elif isinstance(valid, (tuple, list)) and not any(isinstance(v, torch.Tensor) for v in valid):
        yield from (("string", "x"), ("set", set(valid)))


def _from_posenc(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is a posenc source file."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(SRC)


def _all_meta(out: Any) -> bool:
    """Whether ``out`` holds tensors and all of them are on the meta device."""
    tensors = [t for t in _leaves(out) if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.is_meta for t in tensors)


def _leaves(out: Any) -> Iterator[Any]:
    if isinstance(out, (tuple, list)):
        for item in out:
            yield from _leaves(item)
    elif isinstance(out, dict):
        for item in out.values():
            yield from _leaves(item)
    else:
        yield out


def verdict(example: Example, param: str, label: str, value: Any) -> str | None:
    """None when the call with ``param=value`` keeps the contract, else what went wrong."""
    fn, bound = example.bind()
    bound.arguments[param] = value
    try:
        out = fn(*bound.args, **bound.kwargs)
    except (TypeError, ValueError) as error:
        if not _from_posenc(error):
            frame = traceback.extract_tb(error.__traceback__)[-1]
            return f"{type(error).__name__} from {frame.filename}:{frame.lineno}: {error}"
        if param not in str(error) and not any(a in str(error) for a in example.aliases(param)):
            return f"{type(error).__name__} does not name {param!r}: {error}"
        return None
    except Exception as error:
        return f"unclear {type(error).__name__}: {str(error)[:200]}"
    if label in example.ok.get(param, ()) or (label == "meta" and _all_meta(out)):
        return None
    return "accepted"


def _ids() -> list[str]:
    return sorted(EXAMPLES)


def test_every_public_callable_has_an_example():
    """A public callable with parameters has a valid call here, or a reason not to."""
    missing = [
        name
        for name, fn in public_callables().items()
        if name not in EXAMPLES and name not in EXEMPT and _parameters(fn)
    ]
    assert not missing, f"public callables without an example in tests/contract: {missing}"
    stale = sorted(set(EXAMPLES) - set(public_callables()))
    assert not stale, f"examples of callables that are not public (any more): {stale}"


def _parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters if p not in ("self", "cls")]


def test_examples_are_valid():
    """Each example's call succeeds as written: the probes start from a valid call."""
    failures = {}
    for name in _ids():
        try:
            fn, bound = EXAMPLES[name].bind()
            fn(*bound.args, **bound.kwargs)
        except Exception as error:
            failures[name] = f"{type(error).__name__}: {error}"
    assert not failures, failures


@pytest.mark.parametrize("name", _ids())
def test_wrong_values_are_refused_by_name(name: str):
    """Every wrong value of every parameter: a named error from posenc or a documented
    result."""
    example = EXAMPLES[name]
    failures = []
    for param, valid, default in example.parameters():
        for label, value in probes(valid, default):
            if label in example.skip.get(param, ()):
                continue
            problem = verdict(example, param, label, value)
            if problem is not None:
                failures.append(f"{param}={label}: {problem}")
    assert not failures, "\n".join([name, *failures])
