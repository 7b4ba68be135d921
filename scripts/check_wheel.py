"""The clean-wheel check: what a user gets from ``pip install posenc``, tested as they get it.

Builds the sdist and, from it, the wheel; installs the wheel into a virtual environment that
holds only torch, numpy and the wheel's own dependencies as pip resolves them (typer, rich...;
``build/wheel-venv``, created once and reused while it still holds exactly what it was made
with; the wheel itself is rebuilt and reinstalled on every run); then, from a directory
outside the source tree, checks that

- the wheel ships ``py.typed`` and the ``posenc`` command, and pip finds its dependencies met;
- ``import posenc`` works and imports neither transformers nor matplotlib (optional extras);
- ``posenc list`` runs;
- the README quick start (the first ``python`` block of README.md) runs.

Run by ``make wheel-check`` (and so by ``make test``). Usage::

    python scripts/check_wheel.py [--torch "torch==2.13.0"] [--venv build/wheel-venv]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: modules of the optional extras that ``import posenc`` must leave alone
OPTIONAL = ("transformers", "matplotlib")
#: what the installed package must contain besides its modules
WHEEL_FILES = (
    "posenc/__init__.py",
    "posenc/py.typed",
    "posenc/cli/__init__.py",
    "posenc/guide/standard_results.json",  # the published standard run, read by the guide
)
SDIST_FILES = ("pyproject.toml", "README.md", "src/posenc/__init__.py", "src/posenc/py.typed")
#: names of the distributions that mark a GPU build of torch; never pulled into the check
GPU_PREFIXES = ("nvidia-", "triton")

PROBE = """
import importlib.metadata, pathlib, sys
import posenc
here = pathlib.Path(posenc.__file__).resolve()
assert "site-packages" in here.parts, f"posenc imported from {here}, not from the wheel"
assert (here.parent / "py.typed").is_file(), "the installed package has no py.typed"
loaded = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1:])
assert not loaded, f"import posenc imported optional extras: {loaded}"
assert posenc.available(), "no encoding registered"
print(importlib.metadata.version("posenc"), len(posenc.available()), "encodings")
"""


def fail(message: str) -> None:
    print(f"wheel check FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd: list[str | Path], *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; return its stdout, or fail showing all its output."""
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        fail(
            f"`{' '.join(str(c) for c in cmd)}` exited {done.returncode}\n"
            f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
        )
    return done.stdout


def build(outdir: Path) -> tuple[Path, Path]:
    """Build the sdist, then the wheel from it (``python -m build``), into a fresh ``outdir``."""
    shutil.rmtree(outdir, ignore_errors=True)
    # --no-isolation: hatchling comes from the dev extra, so the build needs no download
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", outdir, ROOT])
    wheels, sdists = sorted(outdir.glob("posenc-*.whl")), sorted(outdir.glob("posenc-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        fail(f"expected one wheel and one sdist in {outdir}, got {wheels + sdists}")
    return wheels[0], sdists[0]


def check_archives(wheel: Path, sdist: Path) -> None:
    """The wheel holds the package, ``py.typed`` and the console script, and no tests."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        scripts = zf.read(entry_points).decode() if entry_points else ""
    missing = [f for f in WHEEL_FILES if f not in names]
    if missing:
        fail(f"{wheel.name} lacks {missing}")
    if any(n.startswith("tests/") for n in names):
        fail(f"{wheel.name} ships the tests")
    if "posenc = posenc.cli:main" not in scripts:
        fail(f"{wheel.name} has no `posenc` console script")
    with tarfile.open(sdist) as tf:
        top = sdist.name.removesuffix(".tar.gz")
        names = {n.removeprefix(top + "/") for n in tf.getnames()}
    missing = [f for f in SDIST_FILES if f not in names]
    if missing:
        fail(f"{sdist.name} lacks {missing}")


def installed(python: Path) -> list[str]:
    """``name==version`` of every distribution in the environment of ``python``, sorted."""
    out = run([python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
    return sorted(f"{d['name'].lower()}=={d['version']}" for d in json.loads(out))


def clean_venv(venv: Path, torch_spec: str, wheel: Path) -> Path:
    """A virtual environment with only ``torch_spec``, numpy and ``wheel``'s dependencies
    (and what they need), resolved by pip from the wheel's metadata.

    Reused when it holds exactly the distributions it was created with (recorded in
    ``baseline.json``) besides posenc and the wheel's dependencies still resolve to nothing
    new; made anew otherwise.
    """
    python, baseline = venv / "bin" / "python", venv / "baseline.json"
    if python.exists() and baseline.exists():
        recorded = json.loads(baseline.read_text())
        if recorded["torch"] == torch_spec:
            current = [d for d in installed(python) if not d.startswith("posenc==")]
            if current == recorded["installed"] and not _missing(python, wheel):
                return python
            print(f"wheel check: {venv} changed since it was made; making it anew")
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv])
    requirements = [torch_spec, "numpy", str(wheel)]
    # resolve first: a GPU build of torch (gigabytes of nvidia-* wheels) is never installed
    dry_run = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-"]
    report = json.loads(run([*dry_run, *requirements]))
    names = [item["metadata"]["name"].lower() for item in report["install"]]
    gpu = [n for n in names if n.startswith(GPU_PREFIXES)]
    if gpu:
        fail(f"{torch_spec} resolves to a GPU build here (it would pull {gpu}); aborting")
    run([python, "-m", "pip", "install", "--quiet", *requirements])
    current = [d for d in installed(python) if not d.startswith("posenc==")]
    baseline.write_text(json.dumps({"torch": torch_spec, "installed": current}))
    return python


def _missing(python: Path, wheel: Path) -> list[str]:
    """The distributions pip would add to the environment of ``python`` to install
    ``wheel`` (posenc itself aside): non-empty when the wheel gained a dependency."""
    dry_run = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", wheel]
    report = json.loads(run(dry_run))
    names = [item["metadata"]["name"].lower() for item in report["install"]]
    return [n for n in names if n != "posenc"]


def quick_start() -> str:
    """The first ``python`` code block of README.md."""
    match = re.search(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    if match is None:
        fail("README.md has no ```python block")
    return match.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "wheel-venv")
    parser.add_argument("--outdir", type=Path, default=ROOT / "build" / "dist")
    args = parser.parse_args()
    start = time.perf_counter()

    wheel, sdist = build(args.outdir.resolve())
    check_archives(wheel, sdist)
    python = clean_venv(args.venv.resolve(), args.torch, wheel)
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    # the wheel alone, from the file (no index): its dependencies must already be met
    run([*pip, "install", "--quiet", "--no-deps", "--no-index", "--force-reinstall", wheel])
    run([*pip, "check"])

    # from outside the tree and with no PYTHONPATH, so only the installed wheel is importable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        probe = run([python, "-c", PROBE, *OPTIONAL], cwd=cwd, env=env)
        listing = run([python.parent / "posenc", "list"], cwd=cwd, env=env)
        if "rope" not in listing:
            fail(f"`posenc list` does not list rope:\n{listing}")
        (cwd / "quick_start.py").write_text(quick_start())
        run([python, "quick_start.py"], cwd=cwd, env=env)

    seconds = time.perf_counter() - start
    print(
        f"wheel check: {wheel.name} and {sdist.name} OK in {seconds:.0f} s "
        f"(posenc {probe.strip()}; py.typed; `posenc list`; README quick start; "
        f"no {' or '.join(OPTIONAL)} on import)"
    )


if __name__ == "__main__":
    main()
