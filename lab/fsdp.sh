#!/usr/bin/env bash
# One H200 call: FSDP2 as a Trainer's model reaches it through accelerate (built on the CPU, each
# fully_shard moving its unit to the GPU), measured with every allocation's CUDA stream, for the
# simulator's FSDP2 model (issues 11 and 12):
#  - over NCCL at world size 1 (RANK=0 WORLD_SIZE=1): the real collectives' buffers;
#  - two ranks sharing the GPU over Gloo (--torchrun 2 --share-gpu): sharding at N = 2.
# `base` (default): ZeRO-3 bf16 full and LoRA, ZeRO-3 and ZeRO-2 amp, both ways.
# `variants`: held-out checks written after the model: ZeRO-3 with gradient accumulation 2
# (no_sync), with activation checkpointing, LoRA with checkpointing (NCCL), accumulation (Gloo).
# Results: $OUT/fsdp.tar.xz or $OUT/fsdp-variants.tar.xz (per job: rank results, timelines, logs).
# Usage (device tool): bash lab/fsdp.sh [base|variants]
set -uo pipefail
cd "$(dirname "$0")/.."
SET=${1:-base}
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-fsdp-$SET
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
source lab/common.sh
gpu_header >"$W/run.log" 2>&1
python3 - "$W" "$SET" <<'PY'
import json, sys
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
def make(base, name, ws, **cfg):
    req = json.loads(json.dumps(plan[base]["request"]))
    req["config"]["world_size"] = ws
    req["config"].update(cfg)
    json.dump(req, open(f"{sys.argv[1]}/{name}.request.json", "w"))
if sys.argv[2] == "base":
    for n in ["share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
              "share2-l1b-ampbf16-full-adamw-b2s1024-z3", "share2-l1b-ampbf16-full-adamw-b2s1024-z2"]:
        make(n, n, 2)
        make(n, n.replace("share2-", "ws1-"), 1)
else:
    full, lora = "share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3"
    make(full, "ws1-l1b-bf16-full-adamw-b2s1024-z3-ga2", 1, grad_accum=2)
    make(full, "ws1-l1b-bf16-full-adamw-b2s1024-z3-ckpt", 1, grad_checkpointing=True)
    make(lora, "ws1-l1b-bf16-lora16-b2s1024-z3-ckpt", 1, grad_checkpointing=True)
    make(full, "share2-l1b-bf16-full-adamw-b2s1024-z3-ga2", 2, grad_accum=2)
PY
port=29711
for r in "$W"/ws1-*.request.json; do
    n=$(basename "$r" .request.json)
    port=$((port + 1))
    mkdir -p "$W/$n"
    t0=$(date +%s.%N)
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 200 \
        python3 probes/headroom_engine.py --request "$r" --rank-dir "$W/$n" --timeline "$W/$n/timeline.json" \
        >"$W/$n/log.txt" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
for r in "$W"/share2-*.request.json; do
    n=$(basename "$r" .request.json)
    mkdir -p "$W/$n"
    t0=$(date +%s.%N)
    timeout 240 python3 probes/headroom_engine.py --torchrun 2 --share-gpu --request "$r" --rank-dir "$W/$n" \
        --timeline "$W/$n/timeline.json" >"$W/$n/log.txt" 2>&1
    echo "$n rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
(cd "$W" && tar cJf "$OUT/fsdp$([ "$SET" = base ] || echo "-$SET").tar.xz" .)
ls -la "$OUT"
