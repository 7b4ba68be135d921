"""The arena's ``report.html``: one self-contained page (figures as embedded PNG, inline
CSS for light and dark pages, no scripts, no external reference) with the run's header,
"What this run says" (sentences computed from the numbers, :func:`summary`), a section per
experiment present (figure and table), the timings and the command that made it.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import shlex
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .results import EXPERIMENTS, Panel, aggregate, panels, primary_metric

__all__ = ["EXTRAPOLATES", "build_report", "summary", "write_report"]

# An encoding extrapolates when its perplexity at the longest length is within this factor
# of its perplexity at the training length.
EXTRAPOLATES = 1.25
# Lost in the middle: the middle is "lost" when its accuracy is this far below both ends.
_U_MARGIN = 0.05

_TITLES = {
    "extrapolation": "Extrapolation",
    "context-extension": "Context extension",
    "length-generalization": "Length generalisation",
    "nope-needs-causality": "NoPE needs causality",
    "lost-in-the-middle": "Lost in the middle",
}
_ALT = {
    "extrapolation": "Perplexity against evaluation length per encoding, log-log, per mode",
    "context-extension": "Perplexity at s times L against the factor s per RoPE scaling",
    "length-generalization": "Exact-match accuracy against test length per encoding and task",
    "nope-needs-causality": "Bars of perplexity per encoding, causal beside bidirectional",
    "lost-in-the-middle": "Retrieval accuracy against the gold pair's position per encoding",
}


def _g(value: float) -> str:
    """Three significant digits, without an exponent up to a million."""
    return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:.3g}"


def _rows(
    results: Mapping[str, Any], experiment: str, metric: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """The experiment's rows aggregated over seeds, of ``metric`` (default: its primary)."""
    rows = [r for r in aggregate(results["measurements"]) if r["experiment"] == experiment]
    metric = primary_metric(rows, experiment) if metric is None else metric
    return [r for r in rows if r["metric"] == metric], metric


def _extrapolation(results: Mapping[str, Any]) -> list[str]:
    rows, metric = _rows(results, "extrapolation")
    if not rows:
        return []
    modes = {r.get("mode") for r in rows}
    mode = "sliding" if "sliding" in modes else "chunks" if "chunks" in modes else None
    rows = [r for r in rows if r.get("mode") == mode]
    longest = max(r["eval_length"] for r in rows)
    good: list[str] = []
    bad: list[str] = []
    cannot: list[str] = []
    for encoding in dict.fromkeys(r["encoding"] for r in rows):
        mine = {r["eval_length"]: r for r in rows if r["encoding"] == encoding}
        train = mine[min(mine)]["train_length"]
        at_l = mine.get(train, mine[min(mine)])  # at L, else the shortest length measured
        far = mine.get(longest)
        if at_l["mean"] is None or far is None or far["mean"] is None:
            ran = [n for n, r in mine.items() if r["mean"] is not None]
            why = next((r.get("note") for r in mine.values() if r["mean"] is None), None)
            past = f"past {max(ran)}" if ran else "at all"
            cannot.append(f"{encoding} cannot run {past}" + (f" ({why})" if why else ""))
            continue
        ratio = far["mean"] / at_l["mean"]
        text = (
            f"{encoding} ({_g(at_l['mean'])} at L={at_l['eval_length']}, "
            f"{_g(far['mean'])} at {longest}, ×{ratio:.3g})"
        )
        (good if ratio <= EXTRAPOLATES else bad).append(text)
    where = f"{metric}, {mode} mode" if mode else str(metric)
    out = []
    if good:
        out.append(
            f"Extrapolated ({where}: within {EXTRAPOLATES}× of L at {longest} tokens): "
            + "; ".join(good)
            + "."
        )
    if bad:
        out.append(f"Did not extrapolate ({where}): " + "; ".join(bad) + ".")
    if cannot:
        out.append("Could not run: " + "; ".join(cannot) + ".")
    out.extend(_best_at(rows, metric, longest))
    return out


def _best_at(rows: list[dict[str, Any]], metric: str | None, longest: int) -> list[str]:
    """Which encoding is best at the training length and which at the longest length."""
    train = min(r["train_length"] for r in rows)
    parts = []
    for length, what in ((train, "at L"), (longest, f"at {longest} tokens")):
        ran = [r for r in rows if r["eval_length"] == length and r["mean"] is not None]
        if ran:
            best = min(ran, key=lambda r: r["mean"])
            parts.append(f"{what} {best['encoding']} ({_g(best['mean'])})")
    return [f"Lowest {metric}: " + "; ".join(parts) + "."] if parts else []


def _context_extension(results: Mapping[str, Any]) -> list[str]:
    rows, metric = _rows(results, "context-extension")
    out = []
    for factor in sorted({r["factor"] for r in rows if "factor" in r}):
        parts = []
        for stage in ("zero-shot", "fine-tuned"):
            here = [
                r
                for r in rows
                if r.get("factor") == factor and r.get("stage") == stage and r["mean"] is not None
            ]
            if not here:
                continue
            best = min(here, key=lambda r: r["mean"])
            none = next((r for r in here if r.get("scaling") == "none"), None)
            text = f"best {stage} {best.get('scaling')} ({metric} {_g(best['mean'])}"
            if none is not None and best is not none:
                text += f" vs {_g(none['mean'])} with none, ×{best['mean'] / none['mean']:.2g}"
            parts.append(text + ")")
        if parts:
            out.append(f"Context extension ×{factor}: " + "; ".join(parts) + ".")
    return out


def _length_generalization(results: Mapping[str, Any]) -> list[str]:
    rows, metric = _rows(results, "length-generalization")
    out = []
    for task in sorted({r.get("task") for r in rows}, key=str):
        here = [r for r in rows if r.get("task") == task]
        longest = max(r["eval_length"] for r in here)
        ran = [r for r in here if r["eval_length"] == longest and r["mean"] is not None]
        if not ran:
            continue
        best = max(ran, key=lambda r: r["mean"])
        train = max(r["train_length"] for r in here)
        learned = [r for r in here if r["eval_length"] == train and r["mean"] is not None]
        fit = max(learned, key=lambda r: r["mean"]) if learned else None
        text = f"Length generalisation ({task}, trained up to {train}): "
        if fit is not None:
            text += f"at {train} the best is {fit['encoding']} ({metric} {fit['mean']:.2f}); "
        if best["mean"] > 0:
            text += f"at {longest} the best is {best['encoding']} ({best['mean']:.2f})"
        else:
            text += f"no encoding gets a whole string right at {longest}"
        tokens = [
            r
            for r in _rows(results, "length-generalization", "token_accuracy")[0]
            if r.get("task") == task and r["eval_length"] == longest and r["mean"] is not None
        ]
        if tokens:
            top = max(tokens, key=lambda r: r["mean"])
            text += f"; per token, {top['encoding']} keeps the most ({top['mean']:.2f})"
        out.append(text + ".")
    return out


def _nope(results: Mapping[str, Any]) -> list[str]:
    rows, metric = _rows(results, "nope-needs-causality")
    nope = {r.get("mode"): r["mean"] for r in rows if r["encoding"] == "nope"}
    others: dict[Any, list[float]] = {}
    for r in rows:
        if r["encoding"] != "nope" and r["mean"] is not None:
            others.setdefault(r.get("mode"), []).append(r["mean"])
    out = []
    for mode, verb in (("causal", "works"), ("bidirectional", "fails")):
        mine, theirs = nope.get(mode), others.get(mode)
        if mine is None or not theirs:
            continue
        ref = statistics.median(theirs)
        ratio = mine / ref
        if verb == "works":
            yes = ratio <= EXTRAPOLATES
            what = "works causally" if yes else "does not work causally"
        else:
            yes = ratio > EXTRAPOLATES
            what = "fails bidirectionally" if yes else "does not fail bidirectionally"
        out.append(
            f"NoPE {what}: {mode} {metric} {_g(mine)} vs {_g(ref)} for the other encodings "
            f"(median of {len(theirs)}; ×{ratio:.3g})."
        )
    return out


def _lost_in_the_middle(results: Mapping[str, Any]) -> list[str]:
    rows, metric = _rows(results, "lost-in-the-middle")
    out = []
    for mode in sorted({r.get("mode") for r in rows}, key=str, reverse=True):
        here = [r for r in rows if r.get("mode") == mode]
        n_pairs = max((r.get("n_pairs") or 0) for r in here)
        here = [r for r in here if (r.get("n_pairs") or 0) == n_pairs]
        parts = []
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            at = {
                r["gold_position"]: r["mean"]
                for r in here
                if r["encoding"] == encoding and r["mean"] is not None
            }
            if len(at) < 3:
                continue
            chance = 1 / n_pairs  # a value picked at random from the context
            if statistics.fmean(at.values()) < 1.5 * chance:
                parts.append(
                    f"{encoding} did not learn the retrieval (mean "
                    f"{statistics.fmean(at.values()):.2f}; a random value of the context scores "
                    f"{chance:.2f}), so its curve says nothing"
                )
                continue
            positions = sorted(at)
            first, last = positions[0], positions[-1]
            middle = min(positions, key=lambda p: (abs(p - (first + last) / 2), p))
            a, m, z = at[first], at[middle], at[last]
            shape = "U-shaped" if m < min(a, z) - _U_MARGIN else "no U"
            parts.append(f"{encoding} first {a:.2f}, middle {m:.2f}, last {z:.2f} ({shape})")
        if parts:
            out.append(
                f"Lost in the middle ({mode}, {n_pairs} pairs, {metric}): " + "; ".join(parts) + "."
            )
    return out


def summary(results: Mapping[str, Any]) -> list[str]:
    """The "What this run says" sentences, computed from the numbers (means over seeds)."""
    return [
        *_extrapolation(results),
        *_context_extension(results),
        *_length_generalization(results),
        *_nope(results),
        *_lost_in_the_middle(results),
    ]


# --- HTML ----------------------------------------------------------------------------------

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
    from .figures import figure, png_bytes

    data = base64.b64encode(png_bytes(figure(experiment, measurements))).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_e(_ALT[experiment])}">\n'


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


def _timings(results: Mapping[str, Any]) -> str:
    per: dict[tuple[str, str], list[Mapping[str, float]]] = {}
    for key, t in results.get("timings", {}).items():
        experiment, _, rest = key.partition("/")
        encoding = rest.rpartition("/")[0] or rest
        per.setdefault((experiment, encoding), []).append(t)
    if not per:
        return '<p class="muted">No timings recorded.</p>\n'
    order = sorted(per, key=lambda k: EXPERIMENTS.index(k[0]) if k[0] in EXPERIMENTS else 99)
    rows = []
    for experiment, encoding in order:
        ts = per[experiment, encoding]
        speeds = [t["tokens_per_s"] for t in ts if t.get("tokens_per_s") is not None]
        seconds = sum(t.get("seconds", 0.0) for t in ts)
        speed = f"{statistics.fmean(speeds):,.0f}" if speeds else ""
        rows.append((experiment, encoding, speed, f"{seconds:,.1f}", str(len(ts))))
    panel = Panel(
        "Training speed (mean tokens/s over seeds) and time",
        2,
        ("experiment", "encoding", "tokens/s", "seconds (all seeds)", "seeds"),
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
        _header(results),
        '<h2 id="summary">What this run says</h2>\n',
    ]
    sentences = summary(results)
    if sentences:
        parts.append("<ul>\n" + "".join(f"<li>{_e(s)}</li>\n" for s in sentences) + "</ul>\n")
    else:
        parts.append('<p class="muted">No measurements to summarise.</p>\n')
    for experiment in experiments:
        parts.append(f'<h2 id="{experiment}">{_e(_TITLES[experiment])}</h2>\n')
        parts.append(_figure_img(experiment, results["measurements"]))
        parts.extend(_html_table(p) for p in panels(results, experiment))
    parts.append('<h2 id="timings">Timings</h2>\n')
    parts.append(_timings(results))
    command = shlex.join(str(a) for a in results.get("command", []))
    parts.append(f'<h2 id="command">Command</h2>\n<pre>{_e(command)}</pre>\n')
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def write_report(run_dir: str | Path, results: Mapping[str, Any]) -> Path:
    """Write ``report.html`` into ``run_dir`` atomically; returns its path."""
    from .files import atomic_write_text

    path = Path(run_dir) / "report.html"
    atomic_write_text(path, build_report(results))
    return path
