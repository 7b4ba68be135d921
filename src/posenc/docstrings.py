"""Reading Google-style docstrings: the one parser behind ``posenc info`` and ``posenc plot``.

:func:`section` returns the entries of one section (``Attributes:`` of a config for
:mod:`posenc.describe`, ``Args:`` of a figure function for :mod:`posenc.cli.figure_options`);
:func:`plain` turns the reST markup in them into Markdown code spans. Strict, as the rest
of posenc: an entry that does not read ``name: meaning`` is an error, not a silent skip, so a
key or option cannot lose its help to a typo.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["ROLE", "plain", "section"]

#: an entry's first line: ``name: text`` or ``name (type): text``; ``*args``, ``**kwargs`` too
_ENTRY = re.compile(r"(?P<name>\*{0,2}\w+)\s*(\([^)]*\))?:(\s+(?P<text>.*))?$")
#: a Sphinx cross-reference, ``:role:`~a.b.name``` or ``:role:`name```: ``target`` is what
#: is inside the backquotes without the ``~``
ROLE = re.compile(r":\w+:`~?(?P<target>[^`]+)`")


def section(doc: str | None, header: str) -> dict[str, str]:
    """The entries of section ``header`` (``"Args"``, ``"Attributes"``) of a docstring:
    name -> its text on one line (continuation lines joined with single spaces, markup kept).

    An entry is ``name: text`` (or ``name (type): text``) at the section's indentation; the
    lines indented deeper that follow it continue it. The section ends at the first
    non-blank line indented no deeper than its header (the next section). No docstring or
    no such section: an empty dict.

    Raises:
        ValueError: for a line at the entries' indentation that is not ``name: meaning``, or
            one indented between the header and the entries.

    Example:
        >>> section('''Draw.
        ...
        ...     Args:
        ...         dim: the embedding
        ...             size.
        ...         base (float): the base.
        ...
        ...     Returns:
        ...         a figure.''', "Args")
        {'dim': 'the embedding size.', 'base': 'the base.'}
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"{header}:"]
    if not starts:
        return {}
    header_indent = _indent(lines[starts[0]])
    entries: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: list[str] | None = None
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        if indent == entry_indent:
            match = _ENTRY.match(line.strip())
            if match is None:
                raise ValueError(f"an {header} entry must read 'name: meaning', got {line!r}")
            current = entries.setdefault(match["name"], [])
            if match["text"]:
                current.append(match["text"].strip())
        elif indent > entry_indent and current is not None:
            current.append(line.strip())
        else:  # shallower than the entries but inside the section
            raise ValueError(f"an {header} line is indented inconsistently: {line!r}")
    return {name: " ".join(parts) for name, parts in entries.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def plain(text: str) -> str:
    """reST inline markup as plain text: double-backquoted literals and Sphinx roles
    (``:class:`~a.b.Name```: the last name) become Markdown code spans in single
    backquotes, readable in a terminal and rendered by the docs.

    Example:
        >>> plain("a ``rope_parameters`` dict (:class:`~posenc.rotary.scaling.ScalingConfig`)")
        'a `rope_parameters` dict (`ScalingConfig`)'
    """
    return ROLE.sub(lambda m: f"`{m['target'].rsplit('.', 1)[-1]}`", text).replace("``", "`")
