#!/usr/bin/env bash
# Where the trace's time goes (cProfile of the 8B LoRA trace pinned to two cores) and what a trace
# meets without a visible GPU (issue 26). Results under $OUT: prof.txt, nogpu.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
python3 lab/traceprof.py --out "$OUT" --cpus "${SPEED_CPUS:-0,1}"
rm -f "$OUT"/l8b.trace-tl.json "$OUT"/prof.out
