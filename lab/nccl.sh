#!/usr/bin/env bash
# On the one-GPU machine: build headroom-probe with c10d's NCCL backend (nccl.h from PyTorch's
# nvidia-nccl wheel) and run the multi-process path at world size 1 (--nproc 1) for ZeRO stages
# 0-3, next to the same configurations in one plain process. The difference in device memory
# used beyond PyTorch's reserved pool is what NCCL's communicator costs (invisible to the
# allocator). Results land under $OUT (or ./out) as nccl.tar.gz.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
W=$(mktemp -d)
source lab/build-probe.sh
gpu_build_probe "$W/build.log" || { cp "$W/build.log" "$OUT/"; exit 1; }
grep -E "ProbeNCCL|ProbeGloo|CUDA" "$W/build.log" | head -5
PROBE=build-gpu/probes/headroom-probe
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$W/gpu.txt"
python3 -c "import torch;print(torch.__version__, torch.cuda.nccl.version())" >> "$W/gpu.txt" 2>&1

probe() { # name probe-request.py-args... -- probe-args...
    local name=$1; shift
    local args=(); while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
    lab/probe-request.py "${args[@]}" > "$W/$name.request.json"
    local t=$(date +%s.%N)
    timeout 300 $PROBE --request "$W/$name.request.json" --out "$W/$name.result.json" "$@" > "$W/$name.stdout" 2> "$W/$name.stderr"
    local rc=$?
    echo "$name rc=$rc wall=$(python3 -c "import time;print(round(time.time()-$t,2))")s $(tail -c 300 "$W/$name.stderr" | tr '\n' ' ')"
}
probe 1b-plain llama-3.2-1b --precision amp-bf16 --batch 4 --seq 1024 --
for z in 0 1 2 3; do
    probe 1b-nccl-z$z llama-3.2-1b --precision amp-bf16 --batch 4 --seq 1024 --zero $z -- --nproc 1
done
probe 8b-plain llama-3.1-8b --batch 1 --seq 2048 --
probe 8b-nccl-z3 llama-3.1-8b --batch 1 --seq 2048 --zero 3 -- --nproc 1
python3 - "$W" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.result.json")):
    d = json.load(open(f)); pk = d["peak"]
    ph = {}
    for p in d["phases"]:
        if p["step"] >= 1 or p["phase"] == "after_load":
            ph[p["phase"]] = max(ph.get(p["phase"], 0), p["peak_allocated_bytes"])
    print(os.path.basename(f), d.get("backend", "-"), "peak %.3f GiB reserved %.3f context %.3f" % (
        pk["allocated_bytes"] / 2**30, pk["reserved_bytes"] / 2**30, pk["cuda_context_bytes"] / 2**30),
        {k: round(v / 2**30, 3) for k, v in ph.items()}, "sum", [r.get("parameters_sum") for r in d.get("ranks", [])])
PY
tar -czf "$OUT/nccl.tar.gz" -C "$W" .
