#!/usr/bin/env bash
# The transformers engine's time to answer through headroom-probe, fresh and through the warm
# worker (Note [Warm worker]), beside the plain script with its imports first and where first
# needed; peaks compared to the byte (issue 27). Results under $OUT: warm.jsonl, run.log.
# Usage: bash lab/warmworker.sh [names]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/headroom-pyc
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
    -DHEADROOM_BUILD_BENCH=OFF && cmake --build build-gpu --target headroom-probe) >"$OUT/run.log" 2>&1 || {
    tail -30 "$OUT/run.log"; exit 1; }
python3 lab/warmworker.py "$OUT" build-gpu/probes/headroom-probe \
    "${1:-l8b-bf16-lora16-b4s2048,g2-9b-bf16-lora16-b1s2048,q3moe-bf16-lora16-b2s1024-l8}" 2>&1 | tee -a "$OUT/run.log"
