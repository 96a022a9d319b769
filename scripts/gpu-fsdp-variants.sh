#!/usr/bin/env bash
# One H200 call after scripts/gpu-fsdp.sh: FSDP2 with gradient accumulation (no_sync until the
# last micro-batch) and with activation checkpointing (the recompute inside the unit's backward),
# built on the CPU as the engine now does, every allocation with its CUDA stream: held-out checks
# of the simulator's FSDP2 hooks (they were written before these ran).
# Results: $OUT/fsdp-variants.tar.xz.
# Usage (device tool): bash scripts/gpu-fsdp-variants.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-fsdp-variants
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
date -u >"$W/run.log"
python3 - "$W" <<'PY'
import json, sys
plan = {j["name"]: j for j in json.load(open("scripts/corpus-plan.json"))["jobs"]}
def make(base, name, ws, **cfg):
    req = json.loads(json.dumps(plan[base]["request"]))
    req["config"]["world_size"] = ws
    req["config"].update(cfg)
    json.dump(req, open(f"{sys.argv[1]}/{name}.request.json", "w"))
make("share2-l1b-bf16-full-adamw-b2s1024-z3", "ws1-l1b-bf16-full-adamw-b2s1024-z3-ga2", 1, grad_accum=2)
make("share2-l1b-bf16-full-adamw-b2s1024-z3", "ws1-l1b-bf16-full-adamw-b2s1024-z3-ckpt", 1, grad_checkpointing=True)
make("share2-l1b-bf16-lora16-b2s1024-z3", "ws1-l1b-bf16-lora16-b2s1024-z3-ckpt", 1, grad_checkpointing=True)
make("share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-full-adamw-b2s1024-z3-ga2", 2, grad_accum=2)
PY
port=29811
for r in "$W"/ws1-*.request.json; do
    n=$(basename "$r" .request.json)
    port=$((port + 1))
    mkdir -p "$W/$n"
    t0=$(date +%s.%N)
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 150 \
        python3 probes/headroom_engine.py --request "$r" --rank-dir "$W/$n" --timeline "$W/$n/timeline.json" \
        >"$W/$n/log.txt" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
for r in "$W"/share2-*.request.json; do
    n=$(basename "$r" .request.json)
    mkdir -p "$W/$n"
    t0=$(date +%s.%N)
    timeout 200 python3 probes/headroom_engine.py --torchrun 2 --share-gpu --request "$r" --rank-dir "$W/$n" \
        --timeline "$W/$n/timeline.json" >"$W/$n/log.txt" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
(cd "$W" && tar cJf "$OUT/fsdp-variants.tar.xz" .)
ls -la "$OUT"
