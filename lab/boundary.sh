#!/usr/bin/env bash
# On the GPU machine: solver-boundary runs (lab/boundary.py), and headroom-probe's exit
# status after a transformers-engine run. Everything comes back as $OUT/boundary.tar.xz.
# Usage: lab/boundary.sh [NAME,...] [NAME=START,...]   (default: every job of
# lab/boundary-plan.json, each from its solver value)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}; B="$OUT/boundary"; mkdir -p "$B"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > "$B/smi.txt" 2>&1
source lab/build-probe.sh
(gpu_build_probe "$B/build.log" > "$B/build.rc" 2>&1 && cmake --build build-gpu --target headroom-engine-script >> "$B/build.log" 2>&1) &
BUILD=$!
python3 lab/boundary.py --out "$B" --deadline-s "${DEADLINE_S:-400}" --only "${1:-}" --start "${2:-}"
wait "$BUILD"
if [ -x build-gpu/probes/headroom-probe ]; then
    python3 lab/probe-request.py llama-3.2-1b --batch 2 --seq 512 > "$B/rc.request.json"
    build-gpu/probes/headroom-probe --engine transformers --request "$B/rc.request.json" --out "$B/rc.result.json" \
        > "$B/rc.stdout" 2> "$B/rc.stderr"
    echo "headroom-probe --engine transformers rc=$?" | tee -a "$B/run.log"
    build-gpu/probes/headroom-probe --request "$B/rc.request.json" --out "$B/rc-libtorch.result.json" \
        > /dev/null 2> "$B/rc-libtorch.stderr"
    echo "headroom-probe --engine libtorch rc=$?" | tee -a "$B/run.log"
fi
(cd "$OUT" && tar cJf boundary.tar.xz boundary && rm -rf boundary)
