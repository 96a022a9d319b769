#!/usr/bin/env bash
# Where the transformers engine's imports go, and the engine run in a fork of a process that has
# them (issue 27; lab/importprof.py). Results under $OUT: import-prof.txt, fork.jsonl.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/headroom-pyc
python3 lab/importprof.py "$OUT" "${1:-l8b-bf16-lora16-b4s2048,g2-9b-bf16-lora16-b1s2048,q3moe-bf16-lora16-b2s1024-l8}"
