"""Valid calls of posenc's encodings callables (see tests/contract/registry.py)."""

from __future__ import annotations

__all__: list[str] = []
