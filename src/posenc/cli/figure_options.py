"""A figure function's parameters as command-line options, for ``posenc plot KIND``.

:func:`figure_options` reads the signature and the docstring's ``Args:`` section of a
function of :mod:`posenc.plot` and returns one :class:`FigureOption` per parameter whose
type a command line can carry:

- ``int``, ``float``, ``str``, ``bool`` (a ``--x/--no-x`` switch), a path, each possibly
  ``None``: one value (``--n-heads 4``);
- a fixed tuple of those (``tuple[int, int]``): that many values (``--grid 8 8``);
- a sequence (``Sequence[int]``, ``Sequence[str | Mapping] ...``): one or more values
  (``--positions 0 1 2``); each is read as the first of the element's types it fits:
  ``none`` for None, an int, a float, a JSON object for a mapping (``'{"rope_type":
  "linear", "factor": 4}'``), else text. Element types beyond these (a tuple inside a
  sequence) are left to Python callers.

A parameter of another type keeps the function's default and has no option.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..docstrings import ROLE, section

__all__ = ["METAVARS", "FigureOption", "arg_docs", "convert_item", "figure_options", "help_text"]

SCALARS = (bool, int, float, str)
#: inline code in a docstring (````name````)
_CODE = re.compile(r"``([^`]+)``")
#: how the help names the values of an option of each type
METAVARS = {int: "N", float: "X", str: "TEXT", bool: None}


@dataclasses.dataclass(frozen=True)
class FigureOption:
    """One parameter of a figure function as an option.

    Attributes:
        name: the parameter's name (``n_heads``).
        flag: the option (``--n-heads``).
        annotation: the type typer parses it as (``int``, ``tuple[int, int]``, ``list[str]``).
        members: for a sequence, the types of its elements (each value is converted to
            the first that fits by :func:`convert_item`); empty otherwise.
        help: the docstring's words for it, with the function's default.
        required: True when the function has no default for it.
    """

    name: str
    flag: str
    annotation: Any
    members: tuple[Any, ...]
    help: str
    required: bool


def arg_docs(doc: str | None) -> dict[str, str]:
    """The ``Args:`` section of a Google-style docstring: parameter name -> its text, on
    one line (:func:`posenc.docstrings.section`).

    Example:
        >>> arg_docs('''Draw.
        ...
        ... Args:
        ...     dim: the embedding
        ...         size.
        ...     base: the base.
        ...
        ... Returns:
        ...     a figure.''')
        {'dim': 'the embedding size.', 'base': 'the base.'}
    """
    return section(doc, "Args")


def help_text(doc: str, flags: Mapping[str, str]) -> str:
    """Docstring text as command-line help, on one line: a Sphinx role becomes its name,
    ````name```` of a parameter its option (``flags``: name -> flag), other code loses
    its backquotes.

    Example:
        >>> help_text("Pair ``pair`` of :func:`rope`, ``x + 1``.", {"pair": "--pair"})
        'Pair --pair of rope, x + 1.'
    """
    text = ROLE.sub(r"\g<target>", doc)
    text = _CODE.sub(lambda m: flags.get(m[1], m[1]), text)
    return " ".join(text.split())


def _members(hint: Any) -> tuple[Any, ...]:
    """The types of a union (``int | None`` -> ``(int, NoneType)``), or ``(hint,)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _scalar(members: Sequence[Any]) -> Any:
    """The one type a command line gives for a union of scalars and paths, or None."""
    kinds = [m for m in members if m is not type(None)]
    if any(m not in (*SCALARS, Path) for m in kinds) or not kinds:
        return None
    for choice in (str, float, int, bool, Path):  # the widest that the union accepts
        if choice in kinds:
            return str if choice is Path else choice
    return None  # pragma: no cover


def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """(the annotation typer parses, the element types of a sequence) for ``hint``."""
    members = _members(hint)
    scalar = _scalar(members)
    if scalar is not None:
        return scalar, ()
    kinds = [m for m in members if m is not type(None)]
    if len(kinds) != 1:
        return None
    origin, args = typing.get_origin(kinds[0]), typing.get_args(kinds[0])
    if origin is tuple and args and args[-1] is not Ellipsis:
        one = [_scalar(_members(a)) for a in args]
        if None in one:
            return None
        return tuple.__class_getitem__(tuple(one)), ()
    if origin in (list, tuple, Sequence) and args:
        # the element types a command line can give (a union may hold others too)
        element = tuple(
            m
            for m in _members(args[0])
            if m is type(None) or m in (*SCALARS, Path) or typing.get_origin(m) in (Mapping, dict)
        )
        return (list[str], element) if element else None
    return None


def _hints(draw: Callable[..., Any]) -> dict[str, Any]:
    module = inspect.getmodule(draw)
    namespace = dict(vars(module)) if module else {}
    hints = {}
    for name, p in inspect.signature(draw).parameters.items():
        hint = p.annotation
        if isinstance(hint, str):
            try:
                hint = eval(hint, namespace, {"Any": Any, "Path": Path})
            except Exception:  # a name only imported for type checkers: go by the default
                hint = inspect.Parameter.empty
        if hint is inspect.Parameter.empty and p.default not in (None, inspect.Parameter.empty):
            hint = type(p.default)
        hints[name] = hint
    return hints


def figure_options(draw: Callable[..., Any]) -> list[FigureOption]:
    """The options of figure function ``draw``, in the order of its parameters.

    A default of None is not shown: the docstring says what leaving the option out means.
    """
    docs = arg_docs(draw.__doc__)
    hints = _hints(draw)
    shapes = {
        name: shape
        for name, p in inspect.signature(draw).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and (shape := _shape(hints[name])) is not None
    }
    flags = {name: "--" + name.replace("_", "-") for name in shapes}
    options = []
    for name, p in inspect.signature(draw).parameters.items():
        if name not in shapes:
            continue
        annotation, members = shapes[name]
        required = p.default is p.empty
        words = help_text(docs.get(name, ""), flags)
        if members:
            words += " One or more values."
        if not required and p.default is not None:
            words += f" [default: {_show(p.default)}]"
        options.append(
            FigureOption(name, flags[name], annotation, members, words.strip(), required)
        )
    return options


def _show(value: Any) -> str:
    """A default as it would be typed on the command line."""
    if isinstance(value, (list, tuple)):
        return " ".join(_show(v) for v in value)
    if isinstance(value, Mapping):
        return f"'{json.dumps(value)}'"
    if isinstance(value, str) and (not value.isprintable() or " " in value):
        return repr(value)
    return "none" if value is None else str(value)


def convert_item(text: str, members: Sequence[Any], flag: str) -> Any:
    """One value of a sequence option, as the first type of ``members`` it fits.

    Example:
        >>> convert_item("4", (int, float), "--x"), convert_item("none", (dict, type(None)), "--y")
        (4, None)
    """
    for member in members:
        if member is type(None) and text.lower() == "none":
            return None
        if member in (int, float):
            try:
                return member(text)
            except ValueError:
                continue
        if typing.get_origin(member) in (Mapping, dict) and text.lstrip().startswith("{"):
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{flag}: {text!r} is not a JSON object ({e})") from e
        if member is str:
            return text
        if member is Path:
            return Path(text)
    names = ", ".join(
        "none" if m is type(None) else getattr(m, "__name__", "a JSON object") for m in members
    )
    raise ValueError(f"{flag} takes values of type {names}, got {text!r}")
