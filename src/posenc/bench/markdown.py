"""The Markdown report of a suite run: the machine, then one table per case.

A row is one configuration; each implementation's column holds its median time and its
ratio to the row's floor, ``12.3 ms (1.45x)``; ``—`` where the implementation was skipped
(the reasons are listed under the table, once each). Configuration keys with one value in
every row are stated once, above the table. The bias case adds the extra peak memory
(``+120 MiB``); the training case, one row per encoding and one column per length
(:func:`transposed`), the tokens per second; the patterns case the runner each call took
(``[flex]``) and a second table of the time per token against the length
(:func:`growth_table`); the rolling-cache case the keys and values held (``KV 8.0 MiB``).
Under a table, each speed target that applies to its rows, met or not met
(:mod:`~posenc.bench.targets`).

Example:
    >>> from posenc.bench.timing import row, summarise
    >>> r = row({"L": 8}, {"floor": summarise([0.002]), "x": summarise([0.003])}, "floor")
    >>> print(table([r]))
    | L | floor | x |
    |---|---|---|
    | 8 | 2.00 ms | 3.00 ms (1.50x) |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .targets import verdicts

__all__ = [
    "CASE_TITLES",
    "cell",
    "growth_table",
    "report",
    "side_by_side",
    "spread",
    "table",
    "transposed",
]

CASE_TITLES = {
    "rope": "RoPE apply, q and k (tables precomputed for every implementation)",
    "decode": "RoPE decode step with a KV cache: near against far position",
    "bias": (
        "Bias attention, causal, batch 1 (time, and peak memory against the floor; fwd+bwd: "
        "the gradients of q, k, v and of the encoding's parameters)"
    ),
    "training": "TransformerLM training step (forward, backward, AdamW), against nope",
    "patterns": "Sliding-window and chunked attention against full causal, forward, across L",
    "rolling": "Decode step with a sliding window: rolling KV cache against the full cache",
    "compiled": "torch.compile: a decode step over a static KV cache and a training step",
    "rerotate": "Shifting a KV cache's RoPE keys by one position: re-rotated against recomputed",
    "host": "Host time per call (tiny tensors, one thread): posenc against the peer doing the same",
}


def _ms(value: float) -> str:
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value * 1e3:.0f} µs"


def cell(result: Mapping[str, Any], is_floor: bool = False) -> str:
    """One implementation's cell: the median, its ratio to the floor (not on the floor
    itself), the runner, the extra peak memory, the KV cache and tokens per second when
    recorded."""
    text = _ms(result["median_ms"])
    if not is_floor and result.get("x_floor") is not None:
        text += f" ({result['x_floor']:.2f}x)"
    if result.get("runner") is not None:
        text += f" [{result['runner']}]"
    if result.get("peak_mib") is not None:
        text += f", +{result['peak_mib']:.0f} MiB"
    if result.get("kv_mib") is not None:
        text += f", KV {result['kv_mib']:.1f} MiB"
    if result.get("tokens_per_s") is not None:
        text += f", {result['tokens_per_s']:,.0f} tok/s"
    return text


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "×".join(str(v) for v in value)
    return str(value)


def _constant(records: Sequence[Mapping[str, Any]], key: str) -> bool:
    values = [r["config"].get(key, _constant) for r in records]
    return len(records) > 1 and all(v == values[0] for v in values)


def table(records: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of one case's records: columns for the configuration keys that
    vary (those that do not are stated once, above), then every implementation that
    appears, in order of first appearance."""
    if not records:
        return "(no rows)"
    keys: list[str] = []
    names: list[str] = []
    for r in records:
        keys += [k for k in r["config"] if k not in keys]
        names += [n for n in (*r["results"], *r["skipped"]) if n not in names]
    same = [k for k in keys if _constant(records, k)]
    keys = [k for k in keys if k not in same]
    first = records[0]["config"]
    lines = [f"All rows: {', '.join(f'{k} {_value(first[k])}' for k in same)}.", ""] if same else []
    lines += ["| " + " | ".join([*keys, *names]) + " |", "|" + "---|" * (len(keys) + len(names))]
    for r in records:
        cells = [_value(r["config"].get(k, "")) for k in keys]
        for name in names:
            result = r["results"].get(name)
            cells.append("—" if result is None else cell(result, name == r["floor"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def transposed(records: Sequence[Mapping[str, Any]], key: str) -> str:
    """The Markdown table of records that differ only in ``key``: one row per
    implementation, one column per record (``key value``); the rest of the configuration
    is stated once, above.

    >>> from posenc.bench.timing import row, summarise
    >>> rs = [row({"L": n, "dim": 4}, {"a": summarise([n / 1e3])}, "a") for n in (1, 2)]
    >>> print(transposed(rs, "L"))
    All rows: dim 4.
    <BLANKLINE>
    | implementation | L 1 | L 2 |
    |---|---|---|
    | a | 1.00 ms | 2.00 ms |
    """
    if not records:
        return "(no rows)"
    rest = {k: v for k, v in records[0]["config"].items() if k != key}
    names: list[str] = []
    for r in records:
        names += [n for n in r["results"] if n not in names]
    columns = [f"{key} {_value(r['config'][key])}" for r in records]
    lines = [f"All rows: {', '.join(f'{k} {_value(v)}' for k, v in rest.items())}.", ""]
    lines += [f"| implementation | {' | '.join(columns)} |", "|" + "---|" * (len(columns) + 1)]
    for name in names:
        cells = [
            cell(r["results"][name], name == r["floor"]) if name in r["results"] else "—"
            for r in records
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def growth_table(records: Sequence[Mapping[str, Any]], key: str = "L") -> str:
    """Time per token against ``key`` (the length): one row per (encoding, implementation),
    one column per length, each cell ``us_per_token`` and, after the first length,
    ``growth`` (the median over the previous length's). Flat per-token times (2x per
    doubling) are linear growth, per-token times that double (4x) quadratic.

    >>> from posenc.bench.timing import row, summarise
    >>> rs = [row({"encoding": "e", "L": n}, {"a": summarise([n / 1e6])}, "a") for n in (2, 4)]
    >>> for r, g in zip(rs, (None, 2.0)):
    ...     r["results"]["a"] |= {"us_per_token": 1.0, "growth": g}
    >>> print(growth_table(rs))
    | encoding | implementation | L 2 | L 4 |
    |---|---|---|---|
    | e | a | 1.00 µs/token | 1.00 µs/token (2.00x) |
    """
    if not records:
        return "(no rows)"
    lengths = list(dict.fromkeys(r["config"][key] for r in records))
    cells: dict[tuple[str, str], dict[Any, str]] = {}
    for r in records:
        for name, s in r["results"].items():
            text = f"{s['us_per_token']:.2f} µs/token"
            text += f" ({s['growth']:.2f}x)" if s.get("growth") is not None else ""
            cells.setdefault((r["config"]["encoding"], name), {})[r["config"][key]] = text
    lines = [f"| encoding | implementation | {' | '.join(f'{key} {n}' for n in lengths)} |"]
    lines.append("|" + "---|" * (len(lengths) + 2))
    for (encoding, name), by_length in cells.items():
        row_cells = [by_length.get(n, "—") for n in lengths]
        lines.append(f"| {encoding} | {name} | {' | '.join(row_cells)} |")
    return "\n".join(lines)


def spread(records: Sequence[Mapping[str, Any]]) -> str:
    """One line on the spread of a case: the largest interquartile range over the median of
    any cell, and where.

    >>> from posenc.bench.timing import row, summarise
    >>> spread([row({"L": 8}, {"a": summarise([1.0, 1.0, 2.0, 3.0])}, "a")])
    'Largest spread (interquartile range / median): 83% (a, L 8).'
    """
    worst, where = 0.0, ""
    for r in records:
        for name, s in r["results"].items():
            if s["median_ms"] > 0 and (s["q3_ms"] - s["q1_ms"]) / s["median_ms"] >= worst:
                worst = (s["q3_ms"] - s["q1_ms"]) / s["median_ms"]
                config = ", ".join(f"{k} {_value(v)}" for k, v in r["config"].items())
                where = f"{name}, {config}"
    return f"Largest spread (interquartile range / median): {worst:.0%} ({where})."


def _skips(records: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, str] = {}
    for r in records:
        for name, reason in r["skipped"].items():
            generic = reason.split(" (", 1)[0]
            seen.setdefault(f"{name}: {generic}", "")
    return [f"- {line}" for line in seen]


def _machine(m: Mapping[str, Any]) -> str:
    env = m.get("aten_cpu_capability_env")
    capability = m["cpu_capability"] + (f" (ATEN_CPU_CAPABILITY={env})" if env else "")
    caches = ", ".join(f"{name} {_size(size)}" for name, size in m.get("cpu_caches", {}).items())
    return (
        f"{m['cpu_model']}; flags {', '.join(m['cpu_flags']) or 'none of note'}; ATen "
        f"{capability}; {m['cores']} cores{f' ({caches})' if caches else ''}, "
        f"{m['torch_threads']} torch threads; torch {m['torch']}, Python {m['python']}; "
        f"{m['date']}"
    )


def _calibration(chosen: Mapping[str, int]) -> list[str]:
    """The lines naming what was measured on this machine before the timings
    (:mod:`posenc.calibration`), if anything was."""
    if not chosen:
        return []
    choices = ", ".join(f"{key} = {value}" for key, value in chosen.items())
    return [f"Calibrated on this machine (posenc.calibration): {choices}.", ""]


def _size(size: int) -> str:
    """Bytes as KiB or MiB, whichever is whole (a cache's size)."""
    return f"{size >> 20} MiB" if size >= 1 << 20 and not size % (1 << 20) else f"{size >> 10} KiB"


def report(result: Mapping[str, Any]) -> str:
    """The whole Markdown document of a suite result (:func:`posenc.bench.suite.run`)."""
    peers = ", ".join(f"{k} {v}" for k, v in result["peers"].items())
    out = [
        f"# posenc bench, size {result['size']}",
        "",
        f"`{result['command']}`",
        "",
        f"Machine: {_machine(result['machine'])}.",
        "",
        f"Peers: {peers}.",
        "",
        *_calibration(result.get("calibration", {})),
        "Each cell: median over interleaved rounds (implementations in turns, after warm-up) "
        "and its ratio to the row's floor from the same run; quartiles and extremes are in "
        "the JSON.",
    ]
    for case, records in result["cases"].items():
        text = transposed(records, "length") if case == "training" else table(records)
        out += ["", f"## {CASE_TITLES.get(case, case)}", "", text, "", spread(records)]
        if case == "patterns":
            out += ["", "Time per token (and over the previous length's):", ""]
            out += [growth_table(records)]
        read = verdicts(case, records)
        if read:
            out += ["", "Targets (the ratio of the fastest rounds to the floor's, measured here):"]
            out += [f"- {v.line()}" for v in read]
        skips = _skips(records)
        if skips:
            out += ["", "Skipped:", *skips]
    return "\n".join(out) + "\n"


def side_by_side(results: Mapping[str, Mapping[str, Any]]) -> str:
    """The speed targets read on several suite results (label -> result, e.g. one per
    vector ISA of one machine): one row per target row, one column per result, each cell
    the ratio and met or not met.

    >>> from posenc.bench.timing import row, summarise
    >>> def run(x):
    ...     r = row({"encoding": "t5", "L": 8, "pass": "fwd"},
    ...             {"floor": summarise([1.0]), "posenc": summarise([x])}, "floor")
    ...     return {"cases": {"bias": [r]}, "machine": {"cpu_capability": "AVX2"}}
    >>> print(side_by_side({"native": run(1.2), "default": run(1.7)}))
    | row | target | native (AVX2) | default (AVX2) |
    |---|---|---|---|
    | t5 fwd, L 8 | at most 1.50x | 1.20x (median 1.20x), met | 1.70x (median 1.70x), not met |
    """
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for label, result in results.items():
        for case, records in result["cases"].items():
            for v in verdicts(case, records):
                cell_text = f"{v.measured()}, {v.status()}"
                key = (v.label(), f"at most {v.target.bound:.2f}x")
                rows.setdefault(key, {})[label] = cell_text
    heads = [f"{label} ({r['machine']['cpu_capability']})" for label, r in results.items()]
    lines = ["| row | target | " + " | ".join(heads) + " |", "|" + "---|" * (len(heads) + 2)]
    for (row_label, bound), cells in rows.items():
        values = [cells.get(label, "—") for label in results]
        lines.append(f"| {row_label} | {bound} | " + " | ".join(values) + " |")
    return "\n".join(lines)
