#!/usr/bin/env bash
# One H200 call: FSDP2 as a Trainer's model reaches it through accelerate (built on the CPU, each
# fully_shard moving its unit to the GPU), measured with every allocation's CUDA stream, for the
# simulator's FSDP2 model (issues 11 and 12):
#  - over NCCL at world size 1 (RANK=0 WORLD_SIZE=1): the real collectives' buffers;
#  - two ranks sharing the GPU over Gloo (--torchrun 2 --share-gpu): sharding at N = 2.
# Results: $OUT/fsdp.tar.xz (per job: rank results, timelines, logs; run.log).
# Usage (device tool): bash scripts/gpu-fsdp.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-fsdp
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__)"
} >"$W/run.log" 2>&1
python3 - "$W" <<'PY'
import json, sys
plan = {j["name"]: j for j in json.load(open("scripts/corpus-plan.json"))["jobs"]}
for n in ["share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
          "share2-l1b-ampbf16-full-adamw-b2s1024-z3", "share2-l1b-ampbf16-full-adamw-b2s1024-z2"]:
    req = plan[n]["request"]
    json.dump(req, open(f"{sys.argv[1]}/{n}.request.json", "w"))
    req = json.loads(json.dumps(req))
    req["config"]["world_size"] = 1
    json.dump(req, open(f"{sys.argv[1]}/{n.replace('share2-', 'ws1-')}.request.json", "w"))
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
(cd "$W" && tar cJf "$OUT/fsdp.tar.xz" .)
ls -la "$OUT"
