"""posenc's GPU check in one call: the environment, the CUDA tests, then timings on the
device, written as results.json and results.md into OUTDIR.

    python3 scripts/gpu_check.py OUTDIR             # on a machine with one NVIDIA GPU
    python3 scripts/gpu_check.py OUTDIR --dry-run   # the same code on the CPU, tiny shapes

It needs no network and no install of posenc: it puts ``src/`` on its own ``sys.path`` and
on the tests' ``PYTHONPATH``. Steps, each in its own ``try`` so that one failure loses
nothing else, and the results rewritten after each:

1. the environment (Python, torch, Triton, CUDA, the device and its driver, peers);
2. ``pytest -m "cuda or triton"`` over :data:`TESTS` in a subprocess (with
   ``-n WORKERS`` where pytest-xdist is installed): its summary line and the short text of
   its failures (the whole output in OUTDIR/pytest.txt), killed past ``--tests-timeout``
   seconds;
3. the timed sections of ``scripts/gpu_timing.py``: the copy floor, RoPE, bias encodings
   through flex against SDPA, host reads and syncs per forward, a decode step (eager,
   compiled, CUDA graphs, transformers' Llama); then ``scripts/gpu_host.py``'s: the host
   time and the GPU time of each call of ``posenc bench --cases host``, eager and
   compiled. A section that would start past ``--budget`` seconds of the run is skipped and
   says so; ``--sections decode,host --no-tests`` runs issue 53's rows alone.

The dry run (``--dry-run``) runs every step on the CPU with tiny shapes, compiled rows with
dynamo's ``eager`` backend and the bias rows on posenc's ``math`` backend (compiling on two
CPU cores would take minutes); ``tests/bench/test_gpu_check.py`` runs it so the script
cannot rot. Exit status: 0 when every step ran and the tests passed, 1 otherwise, 2 when
there is no CUDA device and no ``--dry-run``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))  # posenc from this checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_timing, however this is run

import torch  # noqa: E402

TITLES = {
    "copy": "Copy floor: torch.empty_like(x).copy_(x)",
    "rope": "RoPE of q and k",
    "bias": "Bias encodings through flex attention, against causal SDPA (bf16, forward)",
    "syncs": "Host reads and CUDA syncs per call (2-layer TransformerLM)",
    "decode": "Decode step (greedy, KV cache, batch 1)",
    "host": "Host µs and GPU µs of a call (posenc bench --cases host's calls)",
}
PEERS = ("triton", "transformers", "liger-kernel", "pytest", "pytest-xdist", "numpy")


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(device: torch.device) -> dict[str, Any]:
    """What ran: Python, torch, the device, its driver, the peers' versions, posenc's commit."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "posenc": _posenc_version(),
        "posenc_commit": _git("rev-parse", "--short", "HEAD"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "device": str(device),
        "posenc_compiled_kernels": posenc_compiled_enabled(),
    }
    env |= {dist: version(dist) for dist in PEERS}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["device_name"] = props.name
        env["capability"] = f"{props.major}.{props.minor}"
        env["memory_gib"] = round(props.total_memory / 2**30, 1)
        env["driver"] = _nvidia_smi("driver_version")
    else:
        env["device_name"] = f"CPU ({env['cpu']}, {env['cores']} cores)"
    return env


def _posenc_version() -> str:
    try:
        import posenc
    except Exception as e:  # the tests and the sections will say more
        return f"import failed: {type(e).__name__}: {e}"
    return posenc.__version__


def posenc_compiled_enabled() -> bool | None:
    """Whether posenc's own compiled kernels (RoPE, FIRE) run (off on the dry run)."""
    try:
        from posenc.functional import compiled
    except Exception:
        return None
    return getattr(compiled, "ENABLED", None)


def _cpu_model() -> str:
    try:
        from posenc.system import cpu_info

        return cpu_info()[0]
    except Exception:  # posenc's probe moved or failed: the platform's word
        return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _nvidia_smi(field: str) -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


#: the tests marked ``cuda`` (skipped without a GPU) and ``triton`` (the Triton kernels:
#: under the interpreter in ``make test``, compiled for the GPU here)
TESTS = (
    "tests/cuda",
    "tests/models/test_device_clean.py",
    "tests/functional/test_rope_triton.py",
    "tests/functional/test_rope_triton_bad_input.py",
    "tests/rotary/test_triton_kernel.py",
    "tests/rotary/test_triton_checks.py",
)
SUMMARY = re.compile(r"\b\d+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
SHORT = ("FAILED", "ERROR", "XPASS", "XFAIL")


def run_tests(out: Path, workers: int, timeout_s: float, only: str | None = None) -> dict[str, Any]:
    """``pytest -m "cuda or triton"`` over :data:`TESTS` (``-k only`` where given) in a
    subprocess with ``src/`` on PYTHONPATH."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda or triton", *TESTS]
    command += [] if only is None else ["-k", only]
    command += ["-p", "no:randomly", "-p", "no:cacheprovider", "--tb=short"]
    if workers > 1 and version("pytest-xdist") != "not installed":
        command += ["-n", str(workers)]
    paths = [str(SRC), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env["COLUMNS"] = "240"  # the short summary's lines keep more of each failure's message
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout kills its workers too
    )
    timed_out = False
    try:
        text, _ = proc.communicate(timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
    (out / "pytest.txt").write_text(text, encoding="utf-8")
    lines = text.splitlines()
    summary = next((line.strip("= ") for line in reversed(lines) if SUMMARY.search(line)), None)
    return {
        "command": shlex.join(["python3", *command[1:]]),
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "seconds": time.monotonic() - start,
        "summary": summary,
        "short": [line for line in lines if line.startswith(SHORT)][:200],
    }


def run_section(name: str, sections: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """One timed section (a function of ``sections``: gpu_timing's and gpu_host's), its
    failure caught: ``status`` ok, error or skipped."""
    if ctx.past():
        return {"status": "skipped", "why": "past the run's time budget", "rows": [], "seconds": 0}
    start = time.monotonic()
    try:
        result = {"status": "ok", **sections[name](ctx)}
    except Exception as e:
        lines = traceback.format_exc().strip().splitlines()
        result = {"status": "error", "error": f"{type(e).__name__}: {e}", "trace": lines[-12:]}
        result["rows"] = []
    result["seconds"] = time.monotonic() - start
    return result


def fmt(value: Any) -> str:
    """A table cell: floats to 3 significant digits (thousands whole), lists compact."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        if value != value or abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, list):
        return "×".join(map(str, value))
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    kind = "dry run on the CPU" if results["dry_run"] else env.get("device_name")
    parts = [
        f"# posenc GPU check: {env.get('device_name')}{' (dry run)' if results['dry_run'] else ''}",
        f"`{results['command']}`, {results['started']} ({kind}); {results['wall_s']:.0f} s "
        f"of a budget of {results['budget_s']:.0f} s.",
        "## Environment",
        table([{"what": k, "value": v} for k, v in env.items()]),
        "## Tests",
    ]
    tests = results.get("tests") or {}
    if tests:
        parts.append(
            f"`{tests['command']}`: **{tests.get('summary')}** ({tests['seconds']:.0f} s"
            + (", killed at its timeout" if tests.get("timed_out") else "")
            + ")"
        )
        if tests.get("short"):
            parts.append("\n".join(f"    {line}" for line in tests["short"]))
    for name, title in TITLES.items():
        section = results["sections"].get(name)
        if section is None:
            continue
        parts.append(f"## {title}")
        status = section["status"]
        if status != "ok":
            parts.append(f"**{status}**: {section.get('why') or section.get('error')}")
        if section.get("rows"):
            parts.append(table(section["rows"]))
        if section.get("notes"):
            parts.append("\n".join(f"- {note}" for note in section["notes"]))
    return "\n\n".join(parts) + "\n"


def write(out: Path, results: dict[str, Any], start: float) -> None:
    results["wall_s"] = time.monotonic() - start
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "results.md").write_text(markdown(results), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="where results.json and results.md go")
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny shapes")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the run")
    parser.add_argument("--tests-timeout", type=float, default=170.0)
    parser.add_argument(
        "--workers", type=int, default=None, help="pytest-xdist workers (8; 1 on the dry run)"
    )
    parser.add_argument("--no-tests", action="store_true", help="skip the pytest step")
    parser.add_argument("-k", dest="only", help="run the tests pytest -k selects")
    parser.add_argument("--sections", help="the timed sections to run, comma-separated")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device here: run with --dry-run for the CPU half", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    if args.dry_run:
        # tiny shapes: threads would only wait on each other and on a shared machine's
        # other jobs; posenc's own kernels would compile with inductor (minutes on a CPU)
        torch.set_num_threads(1)
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels on the CPU
        with contextlib.suppress(Exception):  # an import error: reported below
            import posenc.functional.compiled

            posenc.functional.compiled.ENABLED = False
    else:
        torch.set_float32_matmul_precision("highest")  # fp32 rows in IEEE fp32
    workers = args.workers if args.workers is not None else 1 if args.dry_run else 8
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "format": 1,
        "command": shlex.join(["python3", "scripts/gpu_check.py", *(argv or sys.argv[1:])]),
        "dry_run": args.dry_run,
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "budget_s": args.budget,
        "environment": environment(device),
        "tests": None,
        "sections": {},
    }
    env = results["environment"]
    print("\n".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    write(out, results, start)
    ok = True
    if not args.no_tests:
        left = args.budget - (time.monotonic() - start) - 60  # a minute kept for the timings
        print(f"\ntests (at most {min(args.tests_timeout, left):.0f} s) ...", flush=True)
        try:
            results["tests"] = run_tests(out, workers, min(args.tests_timeout, left), args.only)
            tests = results["tests"]
            ok = tests["returncode"] == 0
            print(tests["summary"], *tests["short"], sep="\n", flush=True)
        except Exception as e:
            results["tests"] = {"error": f"{type(e).__name__}: {e}", "command": "pytest"}
            results["tests"] |= {"summary": None, "seconds": 0.0, "short": []}
            ok = False
        write(out, results, start)
    try:  # posenc, and the sections with it (a posenc that does not import: every one errs)
        import gpu_host
        import gpu_timing as timing

        sections = {**timing.SECTIONS, **gpu_host.SECTIONS}
    except Exception as e:
        error = {"status": "error", "error": f"{type(e).__name__}: {e}", "rows": []}
        results["sections"] = {name: {**error, "seconds": 0.0} for name in TITLES}
        write(out, results, start)
        traceback.print_exc()
        return 1
    ctx = timing.Context(
        device=device,
        sizes=timing.DRY if args.dry_run else timing.GPU,
        deadline=start + args.budget,
        compile_backend="eager" if args.dry_run else "inductor",
        bias_backend="math" if args.dry_run else "flex",
    )
    chosen = list(sections) if args.sections is None else args.sections.split(",")
    for name in chosen:
        print(f"\n{name} ...", flush=True)
        section = results["sections"][name] = run_section(name, sections, ctx)
        ok = ok and section["status"] == "ok"
        print(f"{section['status']} in {section['seconds']:.1f} s", flush=True)
        write(out, results, start)
    print(f"\n{out / 'results.md'} ({time.monotonic() - start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
