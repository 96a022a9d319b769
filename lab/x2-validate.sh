#!/usr/bin/env bash
# Issue #4's validation, for a machine with two GPUs (the `nvidia-h200-x2` kind): ZeRO 0/1/2/3
# with Llama-3.1-8B amp-bf16 AdamW (b1 x 2048) over NCCL, two ranks, each rank's peak against the
# estimate (headroom-cli compare: within 3%, ranks within 1% of each other); the same for
# Llama-3.2-1B (b4 x 1024), which fits at ZeRO-0 too (8B's DDP needs ~190 GiB a card: its
# out-of-memory run is the check there). Results land under $OUT (or ./out) as x2.tar.gz.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
W=$(mktemp -d)
source lab/build-probe.sh
gpu_build_probe "$W/build.log" || { cp "$W/build.log" "$OUT/"; exit 1; }
cmake --build build-gpu --target headroom-cli >> "$W/build.log" 2>&1 || { tail -20 "$W/build.log"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > "$W/gpu.txt"
nvidia-smi topo -m >> "$W/gpu.txt" 2>&1
for m in "llama-3.1-8b 1 2048" "llama-3.2-1b 4 1024"; do
    set -- $m
    for z in 0 1 2 3; do
        name="$1-z$z"
        lab/probe-request.py "$1" --precision amp-bf16 --batch "$2" --seq "$3" --zero "$z" --world-size 2 \
            > "$W/$name.request.json"
        t=$(date +%s.%N)
        timeout 400 build-gpu/probes/headroom-probe --request "$W/$name.request.json" --nproc 2 \
            --out "$W/$name.result.json" > "$W/$name.stdout" 2> "$W/$name.stderr"
        echo "$name probe rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t,1))")s"
        [ -f "$W/$name.result.json" ] && build-gpu/app/headroom-cli compare "$W/$name.result.json" | tee "$W/$name.compare.txt" | tail -6
    done
done
tar -czf "$OUT/x2.tar.gz" -C "$W" .
