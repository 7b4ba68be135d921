"""The whole state of a KV cache (every tensor, copied, and every flag and count), to test
that a refused call leaves a cache exactly as it was."""

from __future__ import annotations

from typing import Any

import torch

#: what ``update_positions`` checked and ``advance`` has not stored yet: the next call
#: replaces it, and a refused call never reaches ``advance`` (``_ahead``: the positions it
#: checked, past the cached ones, in a scratch copy of them; ``_updated``: the layers this
#: step wrote, begun anew by the next ``update_positions``)
NOT_STATE = ("_pending", "_pending_rings", "_ahead", "_updated")


def state(cache: Any) -> dict[str, Any]:
    """Every attribute of ``cache``, tensors cloned (inside lists and dicts too)."""
    return {k: _copy(v) for k, v in vars(cache).items() if k not in NOT_STATE}


def assert_unchanged(before: dict[str, Any], cache: Any) -> None:
    """Raise unless ``cache`` holds what :func:`state` recorded in ``before``."""
    after = state(cache)
    assert after.keys() == before.keys()
    for name in before:
        _compare(name, before[name], after[name])


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _compare(name: str, before: Any, after: Any) -> None:
    if isinstance(before, torch.Tensor):
        assert isinstance(after, torch.Tensor) and after.dtype == before.dtype, name
        assert torch.equal(after, before), f"{name} changed"
    elif isinstance(before, (list, tuple)):
        assert len(after) == len(before), name
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            _compare(f"{name}[{i}]", b, a)
    elif isinstance(before, dict):
        assert after.keys() == before.keys(), name
        for k in before:
            _compare(f"{name}[{k}]", before[k], after[k])
    else:
        assert after == before, f"{name}: {before!r} -> {after!r}"
