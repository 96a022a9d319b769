#!/usr/bin/env bash
# H200 call: corpus entries through the transformers engine with bitsandbytes (built from source
# in the carried build-bnb/, as scripts/gpu-bnb.sh) and headroom-probe (built in build-gpu, for
# the entries whose ranks share the GPU), the two builds side by side.
# Results under $OUT: run.log, results.jsonl.xz, timelines.tar.xz, logs.tar.xz.
# Usage (device tool, carry ["build-bnb"]): bash scripts/gpu-holdout.sh NAME,NAME,... [deadline_s]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
LOG="$OUT/run.log"
export PYTHONUNBUFFERED=1
WORK=/tmp/headroom-holdout
rm -rf "$WORK" && mkdir -p "$WORK"
date -u >"$LOG"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$LOG" 2>&1
source scripts/gpu-build-probe.sh
(gpu_build_probe "$OUT/probe-build.log" >"$WORK/probe-build.rc" 2>&1) &
probe_pid=$!
t0=$(date +%s)
(cd build-bnb && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMPUTE_BACKEND=cuda \
    -DCOMPUTE_CAPABILITY=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc && cmake --build build -j12) \
    >"$OUT/bnb-build.log" 2>&1 || { echo "BNB BUILD FAILED" | tee -a "$LOG"; tail -n 40 "$OUT/bnb-build.log"; exit 1; }
echo "bitsandbytes built in $(( $(date +%s) - t0 )) s" >>"$LOG"
wait $probe_pid
cat "$WORK/probe-build.rc" >>"$LOG"
export PYTHONPATH="$PWD/build-bnb${PYTHONPATH:+:$PYTHONPATH}"
python3 scripts/corpus.py run --out "$WORK" --only "$1" --deadline-s "${2:-300}" >>"$LOG" 2>&1
tail -n 30 "$LOG"
xz -T16 -6 -c "$WORK/results.jsonl" >"$OUT/results.jsonl.xz"
(cd "$WORK" && tar cf - timelines | xz -T16 -6 >"$OUT/timelines.tar.xz")
(cd "$WORK" && tar cJf "$OUT/logs.tar.xz" req/*.log)
ls -la "$OUT"
