#!/usr/bin/env bash
# posenc's GPU check in one call (docs/gpu.md): the CUDA tests, then RoPE, flex, decode and
# host-time-per-call timings on this machine's GPU, written into OUT (default
# benchmarks/results/gpu).
#   bash scripts/gpu_check.sh [OUT] [--dry-run] [--budget SECONDS] ...
# PYTHON picks the interpreter (default python3: the machine's own torch with CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results/gpu}"
[ "$#" -gt 0 ] && shift
PYTHONUNBUFFERED=1 exec "${PYTHON:-python3}" scripts/gpu_check.py "$out" "$@"
