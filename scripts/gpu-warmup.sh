#!/usr/bin/env bash
# H200 call: build the CUDA probe, then scripts/gpu_warmup.py (warm-up step or state made first).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } > "$OUT/run.log" 2>&1
source scripts/gpu-build-probe.sh
gpu_build_probe "$OUT/build.log" >> "$OUT/run.log" 2>&1 || { tail -30 "$OUT/run.log"; exit 1; }
python3 scripts/gpu_warmup.py --out "$OUT" --deadline-s "${DEADLINE_S:-330}" 2>&1 | tee -a "$OUT/run.log" | tail -40
