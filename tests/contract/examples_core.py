"""Valid calls of posenc's core callables (see tests/contract/registry.py)."""

from __future__ import annotations

__all__: list[str] = []
