#!/usr/bin/env bash
# On the GPU machine: build headroom-probe against PyTorch's CUDA LibTorch, run it on the
# configurations of tests/data/hf_reference_h200.json, and time the headline case.
# Writes probe_h200.json, timing.json and build.log under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
t0=$(date +%s.%N)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
      -DHEADROOM_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
      > "$OUT/build.log" 2>&1 && cmake --build build-gpu --target headroom-probe >> "$OUT/build.log" 2>&1
rc=$?; echo "build rc=$rc in $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
if [ $rc -ne 0 ]; then tail -40 "$OUT/build.log"; exit 1; fi
grep -E "CUDA|Probe" "$OUT/build.log" | head -5
PYTHONUNBUFFERED=1 python3 scripts/gpu_validate.py --probe build-gpu/probes/headroom-probe --out "$OUT"
