#!/usr/bin/env bash
# One H200 call, two questions for the allocator model (issue 12):
#  1. FSDP2 / ZeroRedundancyOptimizer / DDP with two ranks sharing the GPU, every allocation
#     recorded with its CUDA stream (the caching allocator pools blocks by stream; FSDP2 all-gathers
#     and reduce-scatters on side streams): per-rank timelines for the simulator's FSDP2 model.
#  2. What nvidia-smi itself shows: three one-GPU runs alone, nvidia-smi polled every 50 ms
#     beside them (memory.used / reserved / total), against the engine's own device figures.
# Results under $OUT: run.log, ranks/*.json (results), rank-timelines.tar.xz, smi/*.
# Usage (device tool): bash lab/streams.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT/ranks" "$OUT/smi"
LOG="$OUT/run.log"
WORK=/tmp/headroom-streams
rm -rf "$WORK" && mkdir -p "$WORK/tl"
export PYTHONUNBUFFERED=1
date -u >"$LOG"
nvidia-smi --query-gpu=name,memory.total,memory.reserved,memory.used,memory.free,driver_version --format=csv >>"$LOG" 2>&1
nvidia-smi -q -d MEMORY >"$OUT/smi/idle-q.txt" 2>&1
source lab/build-probe.sh
gpu_build_probe "$OUT/probe-build.log" >>"$LOG" 2>&1 || { echo "PROBE BUILD FAILED" | tee -a "$LOG"; exit 1; }
PROBE=build-gpu/probes/headroom-probe

python3 - "$WORK" <<'PY'
import json, sys
plan = json.load(open("lab/corpus-plan.json"))
by = {j["name"]: j for j in plan["jobs"]}
want = ["share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
        "share2-l1b-ampbf16-full-adamw-b2s1024-z3", "share2-l1b-ampbf16-full-adamw-b2s1024-z2",
        "share2-l1b-ampbf16-full-adamw-b2s1024-z1", "share2-l1b-bf16-lora16-b2s1024-z0",
        "l1b-bf16-full-adamw-b4s1024", "l1b-bf16-full-adamw-b2s1024-eager", "q05b-fp32-full-adamw-b4s512"]
for n in want:
    json.dump(by[n]["request"], open(f"{sys.argv[1]}/{n}.json", "w"))
PY

# 1. Ranks, two jobs at a time (each two processes, at most 2 x 25 GiB).
run_ranks() {
    local n=$1 t0=$(date +%s.%N)
    mkdir -p "$WORK/tl/$n"
    timeout 240 "$PROBE" --engine transformers --request "$WORK/$n.json" --out "$OUT/ranks/$n.json" --share-gpu \
        --python python3 --timeline "$WORK/tl/$n/timeline.json" >"$WORK/$n.log" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" >>"$LOG"
}
set -- share2-l1b-bf16-full-adamw-b2s1024-z3 share2-l1b-bf16-lora16-b2s1024-z3 \
       share2-l1b-ampbf16-full-adamw-b2s1024-z3 share2-l1b-ampbf16-full-adamw-b2s1024-z2 \
       share2-l1b-ampbf16-full-adamw-b2s1024-z1 share2-l1b-bf16-lora16-b2s1024-z0
while [ $# -gt 0 ]; do
    run_ranks "$1" &
    [ $# -gt 1 ] && run_ranks "$2" &
    wait
    shift; [ $# -gt 0 ] && shift
done
(cd "$WORK/tl" && tar cJf "$OUT/rank-timelines.tar.xz" .)
(cd "$WORK" && tar cJf "$OUT/ranks/logs.tar.xz" *.log)

# 2. nvidia-smi beside one-GPU runs, each alone (memory.reserved where this nvidia-smi knows it).
FIELDS=timestamp,memory.total,memory.reserved,memory.used,memory.free
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits >/dev/null 2>&1 || FIELDS=timestamp,memory.total,memory.used,memory.free
echo "fields $FIELDS" >>"$LOG"
for n in l1b-bf16-full-adamw-b4s1024 l1b-bf16-full-adamw-b2s1024-eager q05b-fp32-full-adamw-b4s512; do
    nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits -lms 50 >"$OUT/smi/$n.csv" 2>&1 &
    smi=$!
    sleep 0.5
    python3 probes/headroom_engine.py --request "$WORK/$n.json" --out "$OUT/smi/$n.result.json" >"$OUT/smi/$n.log" 2>&1
    echo "$n engine rc=$?" >>"$LOG"
    sleep 0.3
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
done
nvidia-smi -q -d MEMORY >"$OUT/smi/after-q.txt" 2>&1
tail -n 20 "$LOG"
ls -la "$OUT" "$OUT/ranks" "$OUT/smi"
