"""Run ``posenc bench`` under several of ATen's vector ISAs on this machine and put the
speed targets of each side by side (posenc.bench.targets).

A fast path chosen on one CPU must hold on the others: ``ATEN_CPU_CAPABILITY`` lowers the
kernels ATen dispatches to (``avx2`` on an AVX-512 machine, ``default`` for no vectors),
so one machine measures several. Each ISA runs in its own process with its own
``TORCHINDUCTOR_CACHE_DIR`` (kernels compiled under one ISA and reused under another gave
NaN), writes its JSON and Markdown into ``--out``, and ``isas.md`` there holds the table.

    .venv/bin/python scripts/bench_isas.py --isas native avx2 default --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from posenc.bench.markdown import side_by_side


def run_one(isa: str, size: str, cases: str, out: Path) -> dict:
    """One ``posenc bench`` run under ``isa`` (``native``: as the machine chooses)."""
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if isa != "native":
        env["ATEN_CPU_CAPABILITY"] = isa
    with tempfile.TemporaryDirectory(prefix=f"inductor-{isa}-") as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
        command = [sys.executable, "-m", "posenc", "bench", "--size", size, "--cases", cases]
        command += ["--out", str(out), "--quiet"]
        done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    path = next(line for line in done.stdout.split() if line.endswith(".json"))
    return json.loads(Path(path).read_text(encoding="utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isas", nargs="+", default=["native", "avx2", "default"])
    parser.add_argument("--size", default="small")
    parser.add_argument("--cases", default="bias,training")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    results = {}
    for isa in args.isas:
        print(f"{isa} ...", flush=True)
        results[isa] = run_one(isa, args.size, args.cases, args.out)
    first = next(iter(results.values()))["machine"]
    command = "python scripts/bench_isas.py " + " ".join(sys.argv[1:])
    text = (
        f"# posenc bench targets across vector ISAs, size {args.size}\n\n`{command}`\n\n"
        f"Machine: {first['cpu_model']}, {first['cores']} cores, torch {first['torch']}; "
        f"{first['date']}.\n\n{side_by_side(results)}\n"
    )
    path = args.out / "isas.md"
    path.write_text(text, encoding="utf-8")
    print(text)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
