"""The arena's ``report.html``: one self-contained page (figures as embedded PNG, inline
CSS for light and dark pages, no scripts, no external reference) with the run's header,
"What this run says" (sentences computed from the numbers,
:func:`~.summary.summary`), a section per experiment present (its record's title,
figure and tables),
the timings and the command that made it.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import re
import shlex
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..experiments import EXPERIMENTS
from ..files.atomic import atomic_write_bytes, atomic_write_text
from .figures import figure
from .headlines import headlines
from .panels import Panel, panels
from .plotting import png_bytes
from .reading import not_learned
from .summary import summary

__all__ = ["build_report", "write_report"]

_CSS = """
:root { color-scheme: light dark; --fg: #1b1b1b; --bg: #ffffff; --muted: #5b5b5b;
  --line: #d0d0d0; --head: #f2f2f2; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e6e6; --bg: #161616; --muted: #a8a8a8; --line: #3a3a3a; --head: #222222; }
}
body { font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1, h2 { line-height: 1.2; }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: 0.8em 0; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
th, td { border: 1px solid var(--line); padding: 0.2em 0.6em; }
th { background: var(--head); }
td.num { text-align: right; }
img { max-width: 100%; height: auto; background: #ffffff; border-radius: 4px; }
pre { background: var(--head); padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dt { font-weight: 600; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _html_table(panel: Panel) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in panel.header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_e(c)}</td>" if i < panel.n_labels else f'<td class="num">{_e(c)}</td>'
            for i, c in enumerate(row)
        )
        + "</tr>\n"
        for row in panel.rows
    )
    return (
        f"<table>\n<caption>{_e(panel.title)}</caption>\n<thead><tr>{head}</tr></thead>\n"
        f"<tbody>\n{body}</tbody>\n</table>\n"
    )


def _figure_img(experiment: str, measurements: Sequence[Mapping[str, Any]]) -> str:
    data = base64.b64encode(png_bytes(figure(experiment, measurements))).decode("ascii")
    alt = EXPERIMENTS[experiment].alt
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">\n'


def _preset_name(config: Mapping[str, Any]) -> str:
    preset = config.get("preset", "run")
    return str(preset.get("name", "run") if isinstance(preset, Mapping) else preset)


def _header(results: Mapping[str, Any]) -> str:
    config = results.get("config", {})
    preset = config.get("preset")
    seeds = preset.get("seeds") if isinstance(preset, Mapping) else config.get("seeds")
    if seeds is None:
        seeds = sorted({r["seed"] for r in results["measurements"]})
    date = results.get("started")
    if date is None:
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        date = f"{date} (report built)"
    versions = ", ".join(f"{k} {v}" for k, v in results.get("versions", {}).items())
    machine = ", ".join(f"{k} {v}" for k, v in results.get("machine", {}).items())
    items = [
        ("preset", _preset_name(config)),
        ("seeds", ", ".join(map(str, seeds)) if isinstance(seeds, list) else seeds),
        ("corpus", config.get("corpus") or "the Python standard library"),
        ("date", date),
        ("versions", versions or "—"),
        ("machine", machine or "—"),
    ]
    listing = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>\n" for k, v in items)
    settings = json.dumps(preset, indent=1) if isinstance(preset, Mapping) else ""
    details = (
        f"<details><summary>every setting of the preset</summary><pre>{_e(settings)}</pre>"
        "</details>\n"
        if settings
        else ""
    )
    return f"<dl>\n{listing}</dl>\n{details}"


#: the models a run trains, in the order the timings show them (a unit's first name part)
_MODELS = ("lm", "plan", "extend", "copy", "reverse", "mlm", "kv")


def _timings(results: Mapping[str, Any]) -> str:
    """Training speed and time per model and encoding, over seeds. Timing keys are training
    units' names without ``train--``: ``what--encoding[--extra]--seed<k>`` (``lm--rope--seed0``,
    ``extend--yarn--x2--seed0``)."""
    per: dict[tuple[str, str], list[Mapping[str, float]]] = {}
    for key, t in results.get("timings", {}).items():
        what, *middle = key.split("--")
        if middle and re.fullmatch(r"seed\d+", middle[-1]):
            middle.pop()
        per.setdefault((what, " ".join(middle)), []).append(t)
    if not per:
        return '<p class="muted">No timings recorded.</p>\n'
    first = {k: i for i, k in enumerate(per)}
    order = sorted(
        per,
        key=lambda k: (_MODELS.index(k[0]) if k[0] in _MODELS else len(_MODELS), first[k]),
    )
    rows = []
    for what, encoding in order:
        ts = per[what, encoding]
        speeds = [t["tokens_per_s"] for t in ts if t.get("tokens_per_s") is not None]
        seconds = sum(t.get("seconds", 0.0) for t in ts)
        speed = f"{statistics.fmean(speeds):,.0f}" if speeds else ""
        rows.append((what, encoding, speed, f"{seconds:,.1f}", str(len(ts))))
    panel = Panel(
        "Training speed (mean tokens/s over seeds) and time",
        2,
        ("model", "encoding", "tokens/s", "seconds (all seeds)", "seeds"),
        tuple(rows),
    )
    return _html_table(panel)


def build_report(results: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page (see the module docstring)."""
    present = {r["experiment"] for r in results["measurements"]}
    experiments = [e for e in EXPERIMENTS if e in present]
    config = results.get("config", {})
    title = f"posenc arena: {_preset_name(config)} preset"
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n",
        f"<h1>{_e(title)}</h1>\n",
        _pipeline_check(results),
        _header(results),
        '<h2 id="summary">What this run says</h2>\n',
    ]
    sentences, leads = summary(results), headlines(results)
    if leads:
        parts.append("<ul>\n" + "".join(f"<li>{_e(s)}</li>\n" for s in leads) + "</ul>\n")
    if sentences:
        detail = "".join(f"<li>{_e(s)}</li>\n" for s in sentences)
        fold = "<details><summary>Every experiment's numbers</summary>\n"
        parts.append(f"{fold}<ul>\n{detail}</ul>\n</details>\n")
    else:
        parts.append('<p class="muted">No measurements to summarise.</p>\n')
    for experiment in experiments:
        parts.append(f'<h2 id="{experiment}">{_e(EXPERIMENTS[experiment].title)}</h2>\n')
        parts.append(_figure_img(experiment, results["measurements"]))
        parts.extend(_html_table(p) for p in panels(results, experiment))
    parts.append('<h2 id="timings">Timings</h2>\n')
    parts.append(_timings(results))
    command = shlex.join(str(a) for a in results.get("command", []))
    parts.append(f'<h2 id="command">Command</h2>\n<pre>{_e(command)}</pre>\n')
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def _pipeline_check(results: Mapping[str, Any]) -> str:
    """A line under the title when the run's language models did not learn (the guide's
    rule, :func:`~.reading.not_learned`): its numbers check the pipeline, nothing more."""
    unlearned = not_learned(results["measurements"])
    if unlearned is None:
        return ""
    return f"<p><strong>A pipeline check, not evidence:</strong> {_e(unlearned)}.</p>\n"


def write_report(run_dir: str | Path, results: Mapping[str, Any]) -> Path:
    """Write ``report.html`` into ``run_dir`` atomically; returns its path."""
    path = Path(run_dir) / "report.html"
    atomic_write_text(path, build_report(results))
    return path


def write_figures(out_dir: str | Path, results: Mapping[str, Any]) -> list[Path]:
    """Write each experiment's figure as ``<out_dir>/arena-<experiment>.png`` (atomically);
    returns the paths, in report order."""
    present = {r["experiment"] for r in results["measurements"]}
    paths = []
    for experiment in (e for e in EXPERIMENTS if e in present):
        path = Path(out_dir) / f"arena-{experiment}.png"
        atomic_write_bytes(path, png_bytes(figure(experiment, results["measurements"])))
        paths.append(path)
    return paths
