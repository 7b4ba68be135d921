"""Plain-text tables of the registered encodings, for the ``posenc`` command and the demo.

One home for the table helpers, in the tools layer: :mod:`posenc.cli` prints them and
:mod:`posenc.demo` prints them, and neither imports the other for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from . import registry

__all__ = ["config_table", "encodings_table", "format_table", "yes_no"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain text columns, left-aligned, two spaces apart, with a dashed rule under the header."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def yes_no(flag: bool) -> str:
    """``"yes"`` or ``"no"``: how the tables show a flag."""
    return "yes" if flag else "no"


def encodings_table() -> str:
    """Every registered encoding with its kind, properties and summary, one per line."""
    headers = ("name", "kind", "trainable", "relative", "extrapolates", "summary")
    rows = []
    for name in registry.available():
        i = registry.info(name)
        rows.append(
            (
                i.name,
                i.kind,
                yes_no(i.trainable),
                yes_no(i.relative),
                yes_no(i.extrapolates),
                i.summary,
            )
        )
    return format_table(headers, rows)


def config_table(name: str) -> str:
    """The configuration keys of encoding ``name`` with their types and defaults."""
    cls = registry.get(name)
    rows = []
    for field in dataclasses.fields(cls.Config):
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        elif field.name == cls.size_key:
            default = "required (a model fills it in)"
        else:
            default = "required"
        kind = field.type if isinstance(field.type, str) else field.type.__name__
        rows.append((field.name, kind, default))
    if not rows:
        return "(none)"
    return format_table(("key", "type", "default"), rows)
