"""Benchmark: bias encodings through posenc.attention, against the floor and the peers.

For each sequence length and bias encoding it measures the time and the extra peak memory
of one causal attention call (batch 1, 8 heads, head_dim 64, float32 by default), and of
two references: plain causal SDPA with no positional term (the floor) and SDPA with the
bias materialised as an ``[heads, L, L]`` tensor (what most implementations do).

Each case runs in a fresh subprocess. The first call (compilation, warm-up) is not timed;
then the resident-memory high-water mark is reset (Linux ``/proc/self/clear_refs``) and the
extra peak is the high-water mark of the timed calls above the resident memory before them.

    python -m posenc.bench.bias_attention --lengths 1024 2048 4096 8192
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch

from .. import registry
from ..attention import attention
from ..build import build

FLOOR = "floor"
MATERIALISED = "materialised:"


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size


def run_case(case: str, seq_len: int, heads: int, head_dim: int, dtype: str, repeat: int) -> dict:
    """Time (best of ``repeat``) and extra peak memory of one case, in this process.

    ``case`` is a registered bias encoding (``posenc.attention``, backend ``auto``),
    ``"floor"`` (causal SDPA, no bias) or ``"materialised:<encoding>"`` (SDPA with the bias
    as a ``[heads, L, L]`` tensor).
    """
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, heads, seq_len, head_dim, dtype=dt) for _ in range(3))
    if case == FLOOR:
        kwargs = {}

        def call():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    else:
        name = case.removeprefix(MATERIALISED)
        enc = build(name, n_heads=heads, head_dim=head_dim)
        backend = "sdpa" if case.startswith(MATERIALISED) else "auto"
        kwargs = {"encoding": enc, "backend": backend}

        def call():
            return attention(q, k, v, **kwargs)

    with torch.no_grad():
        call()  # compilation and warm-up
        _reset_peak()
        before = _status_mib("VmRSS")
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        peak = _status_mib("VmHWM")
    return {"seconds": min(times), "extra_peak_mib": max(0.0, peak - before)}


def _subprocess(case: str, args) -> dict:
    cmd = [sys.executable, "-m", "posenc.bench.bias_attention", "--one", case]
    cmd += ["--lengths", str(args.length_one), "--heads", str(args.heads)]
    cmd += ["--head-dim", str(args.head_dim), "--dtype", args.dtype, "--repeat", str(args.repeat)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--encodings", nargs="+", default=None, help="default: every bias")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-materialised", action="store_true", help="skip the peers' way")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        result = run_case(
            args.one, args.lengths[0], args.heads, args.head_dim, args.dtype, args.repeat
        )
        print(json.dumps(result))
        return 0
    names = args.encodings or [n for n in registry.available() if registry.info(n).kind == "bias"]
    cases = [FLOOR, *names]
    if not args.no_materialised:
        cases += [MATERIALISED + n for n in names]
    machine = platform.processor() or platform.machine()
    print(
        f"# bias attention, batch 1, heads {args.heads}, head_dim {args.head_dim}, {args.dtype}, "
        f"best of {args.repeat}; torch {torch.__version__}, {machine}, "
        f"{os.cpu_count()} cores, {torch.get_num_threads()} threads"
    )
    print("| case | L | seconds | x floor | extra peak MiB |")
    print("|---|---|---|---|---|")
    for length in args.lengths:
        args.length_one = length
        floor = None
        for case in cases:
            r = _subprocess(case, args)
            if "error" in r:
                print(f"| {case} | {length} | error: {r['error'][:60]} | | |", flush=True)
                continue
            floor = r["seconds"] if case == FLOOR else floor
            ratio = r["seconds"] / floor if floor else float("nan")
            print(
                f"| {case} | {length} | {r['seconds']:.3f} | {ratio:.2f} | "
                f"{r['extra_peak_mib']:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
