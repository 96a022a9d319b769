#!/usr/bin/env bash
# On nvidia-h200-x2: the transformers engine with two ranks on two GPUs over NCCL (issue 10),
# Llama-3.1-8B amp-bf16 AdamW, batch 1 x 1024, ZeRO 0-3 (DDP, ZeroRedundancyOptimizer, FSDP2
# reshard off / on). Results land in $OUT/x2/z<k>/ (rank files and the merged result).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}; X="$OUT/x2"; mkdir -p "$X"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$X/smi.txt" 2>&1
for z in ${ZS:-3 2 1 0}; do
    d="$X/z$z"; mkdir -p "$d"
    python3 lab/probe-request.py llama-3.1-8b --precision amp-bf16 --batch 1 --seq 1024 --zero "$z" --world-size 2 > "$d/request.json"
    t0=$(date +%s.%N)
    timeout 150 python3 probes/headroom_engine.py --torchrun 2 --request "$d/request.json" --out "$d/result.json" \
        --steps 2 --device cuda --rank-dir "$d" --sharding fsdp --no-attribution > "$d/stdout" 2> "$d/stderr"
    echo "z$z rc=$? in $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$X/run.log"
done
(cd "$OUT" && tar cJf x2.tar.xz x2 && rm -rf x2)
