"""A :class:`~posenc.hf.inspect.checkpoint.CheckpointReport` shown: as text lines
(:func:`render_report`) and as the ``frequencies`` figure of its RoPE
(:func:`frequencies_figure`; matplotlib is imported only there).
"""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any

from ...arguments import check_int
from ...rotary.rope import RoPE
from ..keys import FULL
from .checkpoint import CheckpointReport
from .table import plan_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["frequencies_figure", "render_report"]


def _value(value: Any) -> str:
    """A config value, a long list shortened to its length and ends."""
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"[{len(value)} values: {value[0]:g} ... {value[-1]:g}]"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _params(params: dict[str, Any]) -> str:
    """``key=value, ...`` of the keys that are set (None: unset, not shown)."""
    shown = [f"{k}={_value(v)}" for k, v in params.items() if v is not None]
    return ", ".join(shown) or "no parameters"


def _check_report(report: Any) -> None:
    """Raise ``TypeError`` naming ``report`` unless it is a :class:`CheckpointReport`."""
    if not isinstance(report, CheckpointReport):
        raise TypeError(
            "report must be a CheckpointReport (posenc.hf.inspect_checkpoint's), got "
            f"{type(report).__name__}"
        )


def render_report(report: CheckpointReport, width: int = 80) -> list[str]:
    """The report as lines of text: ``key: value``, the build code, the extension plans.

    The layer plan is a table of one row per kind of layer, at most ``width`` columns
    (:func:`~posenc.hf.inspect.table.plan_table`); the ``apply:`` line names the methods
    of the plans and is left out where ``extend_context`` refuses the model (the line
    that says why stands in its place).

    Example:
        >>> import json, tempfile, pathlib
        >>> from posenc.hf.inspect.checkpoint import inspect_checkpoint
        >>> file = pathlib.Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = file.write_text(json.dumps({"model_type": "bloom", "n_head": 16}))
        >>> render_report(inspect_checkpoint(file))[1]
        'encoding: alibi (n_heads=16)'
    """
    _check_report(report)
    check_int("width", width)
    r, f = report, report.rotary
    lines = [
        f"checkpoint: {r.path} (model_type {r.model_type})",
        f"encoding: {r.encoding} ({_params(r.config) if f is None else type(f.rope).__name__})",
    ]
    if f is not None:
        factor = f.rotary_dim / f.head_dim
        where = "last" if getattr(f.rope.config, "rotary_at", "start") == "end" else "first"
        partial = "" if factor == 1 else f" (partial rotary, factor {factor:g}: the {where})"
        lines += [
            f"head_dim: {f.head_dim}, rotary dims {f.rotary_dim}{partial}",
            f"base (rope_theta): {f.base:g}",
            f"pair layout: {f.layout} ({f.layout_reason})",
            f"scaling: {f.rope_type} ({_params(f.scaling)})",
            f"original context: {f.original_context or 'not recorded in the config'}",
            f"extended context: {_extended(f.rope_type, f.extended_context)}",
            f"attention factor: {f.attention_factor:.6g}",
            f"longest wavelength: {f.longest_wavelength:,.0f} tokens{_versus(f)}",
        ]
        if f.mrope_section is not None:
            lines.append(f"mrope section (t, h, w pairs): {list(f.mrope_section)}")
    lines += [f"note: {note}" for note in r.notes]
    if r.plan is not None:
        lines += [f"layer plan ({len(r.plan)} layers):"]
        lines += [f"    {line}" for line in plan_table(r.plan, width - 4)]
    lines = _wrapped(lines, width)
    lines += ["build:", *_code_lines(r.build, width)]
    if r.target is not None:
        lines += _wrapped(_extension_lines(r), width)
    return lines


#: a line of code that ends with a quoted string in brackets (the config's path)
_QUOTED_END = re.compile(r"^(?P<head>.*\()(?P<quoted>'[^']*'\)*)$")


def _code_lines(code: str, width: int) -> list[str]:
    """``code`` indented four; a line too wide that ends with a quoted string in brackets
    (``json.load(open('<path>'))``) broken before the string, still valid Python."""
    out = []
    for line in code.splitlines():
        found = _QUOTED_END.match(line)
        if len(line) + 4 <= width or found is None:
            out.append(f"    {line}")
            continue
        out += [f"    {found['head']}", f"        {found['quoted']}"]
    return out


def _wrapped(lines: list[str], width: int) -> list[str]:
    """Each line at most ``width`` columns where it has spaces to break at: the rest under
    it, indented four more than the line (a path or a long word stays whole)."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        out += textwrap.wrap(
            line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        ) or [line]
    return out


def _extension_lines(r: CheckpointReport) -> list[str]:
    """The extension plans of the report's target (given), one line each, and what applies
    them."""
    lines = [f"extension to {r.target} tokens:"]
    for plan in r.extensions:
        u, name = plan.updates, "rope_parameters"
        params = u[name]
        if isinstance(params.get(FULL), dict):  # per layer type: the one scaled
            name, params = f"{name}[{FULL!r}]", params[FULL]
        dynamic = params.get("rope_type") == "dynamic"
        lines.append(
            f"    {plan.method} (factor {plan.factor:g}): {name}={{{_params(params)}}}; "
            f"max_position_embeddings={u['max_position_embeddings']}"
            + (" (transformers' dynamic NTK starts past it)" if dynamic else "")
        )
        if plan.note:
            lines.append(f"        {plan.note}")
    if r.extension_windows:
        lines.append(f"    windows: {r.extension_windows}")
    if r.extension_note:
        lines.append(f"    {r.extension_note}")
    if r.extensions and r.extend_refusal:
        lines.append(f"    extend_context refuses this model: {r.extend_refusal}")
    elif r.extensions:
        methods = [p.method for p in r.extensions]
        times = f"{r.extensions[0].factor:g}"
        if len(methods) == 1:
            call = f"posenc.hf.extend_context(model, {methods[0]!r}, {times})"
        else:
            call = f"posenc.hf.extend_context(model, METHOD, {times}), METHOD one of "
            call += ", ".join(repr(m) for m in methods)
        lines.append(f"    apply: {call}")
    return lines


def _extended(rope_type: str, extended: int | None) -> str:
    if rope_type == "default":
        return "none (unscaled)"
    if extended is None:
        return "grows with the sequence (dynamic)"
    return str(extended)


def _versus(f: Any) -> str:
    context = f.extended_context or f.original_context
    if not context:
        return ""
    return f" ({f.longest_wavelength / context:.3g}x the context {context})"


def _line(rope: RoPE) -> dict[str, Any]:
    """A built RoPE's scaling as the ``rope_parameters`` dict the figure draws."""
    return {**rope.config.scaling.to_dict(), "rope_theta": rope.config.base}


def frequencies_figure(report: CheckpointReport) -> Figure:
    """The ``frequencies`` figure (:func:`posenc.plot.frequencies.frequencies`) of a checkpoint.

    Each rotary pair's wavelength ``2π/θ_i`` under the checkpoint's own scaling and plain
    RoPE, with the original context marked and, with extension plans, the target and the
    RoPE of each plan; without plans, a scaled checkpoint's own extended context (the
    target of a plan that extend_context refuses is not drawn). Every line is drawn from
    the built encoding's scaling and base, at ``seq_len`` = the length marked.

    Raises:
        ValueError: a non-rotary checkpoint, or lengths the figure cannot mark (an unscaled
            checkpoint without a target longer than its context; a scaling whose original
            length the config does not record).
        TypeError: a ``report`` that is not a :class:`CheckpointReport`.
        ImportError: matplotlib is missing.
    """
    _check_report(report)
    from ...plot.frequencies import frequencies

    f = report.rotary
    if f is None:
        raise ValueError(
            f"the frequencies figure is for rotary checkpoints; {report.model_type!r} uses "
            f"{report.encoding}"
        )
    if f.original_context is None:
        raise ValueError(
            f"the config does not record the original context of its {f.rope_type!r} scaling"
        )
    target, name = report.target, "target"
    if not report.extensions and f.extended_context is not None:
        target, name = f.extended_context, "extended"  # the checkpoint's own reach
    if target is None or target <= f.original_context:
        raise ValueError(
            f"the figure needs a target longer than the original context {f.original_context}: "
            "give target (--target N)"
        )
    own = f"checkpoint ({f.rope_type})" if f.rope_type != "default" else "checkpoint (none)"
    lines: list[tuple[str, dict[str, Any]]] = [(own, _line(f.rope))]
    if f.rope_type != "default":
        lines.append(("none", {"rope_type": "default"}))
    lines += [(f"{p.method} (plan)", _line(p.rope)) for p in report.extensions if p.rope]
    return frequencies(
        head_dim=f.head_dim,
        base=f.base,
        original=f.original_context,
        target=target,
        scalings=lines,
        rotary_dim=f.rotary_dim,
        target_name=name,
    )
