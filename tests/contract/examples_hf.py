"""Valid calls of posenc's hf callables (see tests/contract/registry.py)."""

from __future__ import annotations

__all__: list[str] = []
