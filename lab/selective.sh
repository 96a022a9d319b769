#!/usr/bin/env bash
# H200 call: build the CUDA probe, then lab/selective.py. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
source lab/build-probe.sh
gpu_build_probe "$OUT/build.log" > "$OUT/run.log" 2>&1 || { tail -20 "$OUT/run.log"; exit 1; }
python3 lab/selective.py --out "$OUT" --deadline-s "${DEADLINE_S:-300}"
tail -12 "$OUT/run.log"
