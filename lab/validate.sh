#!/usr/bin/env bash
# On the GPU machine: build headroom-probe against PyTorch's CUDA LibTorch, run it on the
# configurations of tests/data/hf_reference_h200.json, and time the headline case.
# Writes probe_h200.json, timing.json and build.log under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
source lab/build-probe.sh
gpu_build_probe "$OUT/build.log" || exit 1
grep -E "CUDA|Probe" "$OUT/build.log" | head -5
PYTHONUNBUFFERED=1 python3 lab/validate.py --probe build-gpu/probes/headroom-probe --out "$OUT"
