"""When posenc reads tensor values on the host to check them, and how often.

A value check (a token id past the vocabulary, a position past a learned table, a NaN key)
needs the tensor's values on the host: a device sync, which stalls a GPU's stream, keeps
a forward out of a CUDA graph and breaks a ``torch.compile`` graph. posenc keeps its
checks and bounds what they cost:

- **one read for many checks**: inside :func:`batched`, value checks are gathered and read
  together when the block ends, one sync per device (a
  :class:`~posenc.models.TransformerLM` forward checks its token ids, positions and masks
  that way, and reads the facts its layers choose kernels by in the same read);
- **checked once**: inside :func:`checked` (a model's layers, after that entry read), the
  checks of values already checked are skipped;
- **off**: ``posenc.set_validation(False)``, or ``with posenc.validation(False):`` for a
  block, skips value checks altogether; shape, dtype and device checks always run. Value
  checks are also skipped while ``torch.compile`` or ``torch.export`` traces (a
  data-dependent branch would break the graph) and on the meta device (no values).

Example:
    >>> import torch, posenc
    >>> from posenc.host_reads import batched, read
    >>> seen = []
    >>> with batched():  # both checks cost one read, at the end of the block
    ...     read(torch.tensor([3, 2**60]), seen.append)
    ...     read(torch.tensor([0.5]), seen.append)
    ...     print(seen)
    []
    >>> seen
    [[3, 1152921504606846976], [0.5]]
    >>> with posenc.validation(False):
    ...     posenc.validation_enabled()
    False
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

__all__ = [
    "batched",
    "checked",
    "read",
    "read_now",
    "reads_values",
    "set_validation",
    "traced",
    "validation",
    "validation_enabled",
]

#: an integer is read as two float64 halves, ``hi * 2**32 + lo``, both exact
_HALF = 2**32


class _State(threading.local):
    def __init__(self) -> None:
        self.enabled = True
        self.checked = 0  # depth of checked() blocks
        self.pending: list[tuple[torch.Tensor, Callable[[list], None]]] | None = None


_STATE = _State()


def set_validation(enabled: bool) -> None:
    """Turn posenc's value checks on (the default) or off for this thread.

    Off, nothing reads a tensor's values to check it: a token id past the vocabulary or a
    position past a learned table then fails inside torch (an index error) or, on a GPU,
    reads out of bounds; a NaN in a masked slot is not kept from the fused kernels. Shape,
    dtype and device checks always run."""
    _check_enabled(enabled)
    _STATE.enabled = enabled


def validation_enabled() -> bool:
    """Whether value checks are on (:func:`set_validation`)."""
    return _STATE.enabled


def validation(enabled: bool) -> AbstractContextManager[None]:
    """Value checks on or off inside a ``with`` block (:func:`set_validation`), restored
    after it. ``enabled`` is checked at the call, not when the block is entered."""
    _check_enabled(enabled)
    return _validation(enabled)


@contextmanager
def _validation(enabled: bool) -> Iterator[None]:
    before = _STATE.enabled
    _STATE.enabled = enabled
    try:
        yield
    finally:
        _STATE.enabled = before


def traced(manager: Callable[[], AbstractContextManager[None]]) -> AbstractContextManager[None]:
    """``manager()``, or a no-op while ``torch.compile`` or ``torch.export`` traces (value
    checks are skipped there anyway, and the trace holds no Python state of its own)."""
    return nullcontext() if torch.compiler.is_compiling() else manager()


def checked() -> AbstractContextManager[None]:
    """A block whose inputs were checked before it: value checks inside are skipped (a
    model's layers, after the forward's entry checks). Blocks nest. While ``torch.compile``
    traces, a no-op (no value is read there: :func:`reads_values`)."""
    return nullcontext() if torch.compiler.is_compiling() else _CHECKED


class _Checked:
    """:func:`checked`'s block: a depth per thread (a class, not a generator: a forward
    enters several, and a generator's block costs microseconds)."""

    def __enter__(self) -> None:
        _STATE.checked += 1

    def __exit__(self, *exc: object) -> None:
        _STATE.checked -= 1


_CHECKED = _Checked()


def in_checked() -> bool:
    """Whether this thread runs inside :func:`checked`: a model's layers, whose forward
    checked their inputs (its KV cache against them among those) before them."""
    return _STATE.checked > 0


def reads_values(*tensors: torch.Tensor | None) -> bool:
    """Whether a value check should read ``tensors`` now: checks are on, not inside
    :func:`checked`, not under ``torch.compile``, and every tensor given (None skipped)
    has values (not on the meta device, not empty)."""
    if torch.compiler.is_compiling() or not _STATE.enabled or _STATE.checked:
        return False
    return all(t is None or (not t.is_meta and t.numel() > 0) for t in tensors)


def read(values: torch.Tensor, then: Callable[[list], None]) -> None:
    """Read ``values`` (``[n]``, any real dtype, not on the meta device) on the host and
    call ``then`` with them as a list (Python ints for integer and bool tensors, floats
    otherwise): now, or, inside :func:`batched`, when the block ends, with every other
    value read there. ``then`` raises where a check fails, or stores a fact.

    Raises:
        TypeError: ``values`` not a tensor of a real dtype (a complex one has no one number
            per item; a list has no device to read from), or ``then`` not callable, named.
        ValueError: ``values`` on the meta device (:func:`reads_values` says False there).
    """
    _check_read(values, then)
    if _STATE.pending is not None:
        _STATE.pending.append((values, then))
        return
    _read_all([(values, then)])


def read_now(values: torch.Tensor, then: Callable[[list], None]) -> None:
    """:func:`read` at once, also inside :func:`batched`: for a value needed to go on (a
    fact that chooses a kernel), not one that only checks."""
    _check_read(values, then)
    _read_all([(values, then)])


@contextmanager
def batched() -> Iterator[None]:
    """Gather the :func:`read` calls inside the block and read them together at its end:
    one host read per device. A nested block joins the outer one. The block's code must
    not depend on what the reads would check (nothing indexes a table by a position
    before the block ends); on an exception the pending reads are dropped."""
    if _STATE.pending is not None:
        yield
        return
    _STATE.pending = []
    try:
        yield
        pending = _STATE.pending
    finally:
        _STATE.pending = None
    _read_all(pending)


def _check_enabled(enabled: object) -> None:
    if not isinstance(enabled, bool):  # config.check_bool's rule; config is a layer above
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__} ({enabled!r})")


def _check_read(values: object, then: object) -> None:
    """Raise, naming the argument, unless :func:`read` can read ``values`` and call ``then``."""
    if not isinstance(values, torch.Tensor) or values.is_complex():
        got = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"values must be a tensor of a real dtype (bool, int, float), got {got}")
    if values.is_meta:
        raise ValueError("values are on the meta device, which holds none to read")
    if not callable(then):
        raise TypeError(f"then must be callable, got {type(then).__name__}")


def _read_all(items: list[tuple[torch.Tensor, Callable[[list], None]]]) -> None:
    """Read every item's values, one host read per device, then call each item's ``then``
    in order."""
    by_device: dict[torch.device, list[int]] = {}
    for i, (values, _) in enumerate(items):
        by_device.setdefault(values.device, []).append(i)
    decoded: dict[int, list] = {}
    for indices in by_device.values():
        rows = [_as_float64(items[i][0]) for i in indices]
        # the one host read of this device (one row: no copy to join them)
        flat = (rows[0] if len(rows) == 1 else torch.cat(rows)).tolist()
        start = 0
        for i, row in zip(indices, rows, strict=True):
            chunk, start = flat[start : start + row.numel()], start + row.numel()
            decoded[i] = _decode(items[i][0], chunk)
    for i, (_, then) in enumerate(items):
        then(decoded[i])


def _as_float64(values: torch.Tensor) -> torch.Tensor:
    """``values`` flattened to float64 exactly: an integer as its two halves."""
    if values.dtype == torch.float64 and values.dim() == 1:
        return values  # read as it is (tolist reads no gradient)
    values = values.detach().reshape(-1)
    if values.is_floating_point():
        return values.to(torch.float64)
    whole = values.long()
    hi = torch.div(whole, _HALF, rounding_mode="floor")
    return torch.stack([hi, whole - hi * _HALF], dim=-1).reshape(-1).to(torch.float64)


def _decode(values: torch.Tensor, flat: list[float]) -> list:
    if values.is_floating_point():
        return flat
    return [int(hi) * _HALF + int(lo) for hi, lo in zip(flat[0::2], flat[1::2], strict=True)]
