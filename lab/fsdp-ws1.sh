#!/usr/bin/env bash
# One H200 call: FSDP2 (ZeRO-3 and ZeRO-2) and ZeroRedundancyOptimizer at world size 1 over NCCL
# (RANK=0 WORLD_SIZE=1), every allocation recorded with its CUDA stream: FSDP2's buffers as a real
# NCCL run makes them (two ranks sharing a GPU must use Gloo, whose all_gather_into_tensor adds a
# full-size temporary per unit). Data for the simulator's FSDP2 model (issue 12).
# Results: $OUT/fsdp-ws1.tar.xz (results, timelines, logs).
# Usage (device tool): bash lab/fsdp-ws1.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-fsdp-ws1
rm -rf "$W" && mkdir -p "$W"
python3 - "$W" <<'PY'
import json, sys
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
for n in ["share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
          "share2-l1b-ampbf16-full-adamw-b2s1024-z3", "share2-l1b-ampbf16-full-adamw-b2s1024-z2",
          "share2-l1b-ampbf16-full-adamw-b2s1024-z1"]:
    req = plan[n]["request"]
    req["config"]["world_size"] = 1
    json.dump(req, open(f"{sys.argv[1]}/{n.replace('share2-', 'ws1-')}.json", "w"))
PY
port=29611
for r in "$W"/ws1-*.json; do
    n=$(basename "$r" .json)
    port=$((port + 1))
    t0=$(date +%s.%N)
    mkdir -p "$W/$n"  # a rank writes its result into --rank-dir as rank0.json
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 200 \
        python3 probes/headroom_engine.py --request "$r" --rank-dir "$W/$n" --timeline "$W/$n/timeline.json" \
        >"$W/$n.log" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
(cd "$W" && tar cJf "$OUT/fsdp-ws1.tar.xz" .)
ls -la "$OUT"
