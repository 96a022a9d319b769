#!/usr/bin/env bash
# On the GPU machine: build headroom-probe against PyTorch's CUDA LibTorch, then exercise what
# the validation run does not: the default scenario with --out and --snapshot (the README's
# measured overlay) and --alloc-conf expandable_segments:True. Out-of-memory runs: lab/oom.sh.
# Results land under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
source lab/build-probe.sh
gpu_build_probe "$OUT/build.log" || exit 1
PROBE=build-gpu/probes/headroom-probe
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"

probe() { # name probe-request.py-args... -- probe-args...
    local name=$1; shift
    local args=(); while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
    lab/probe-request.py "${args[@]}" > "$OUT/$name.request.json"
    local t=$(date +%s.%N)
    $PROBE --request "$OUT/$name.request.json" --out "$OUT/$name.result.json" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
    local rc=$?
    echo "$name rc=$rc wall=$(python3 -c "import time;print(round(time.time()-$t,2))")s $(tail -c 300 "$OUT/$name.stderr" | tr '\n' ' ')"
}
probe default llama-3.1-8b --finetune lora --batch 4 --seq 2048 -- --snapshot "$OUT/default.snapshot.json"
probe default-expandable llama-3.1-8b --finetune lora --batch 4 --seq 2048 -- --alloc-conf expandable_segments:True
probe full-1b llama-3.2-1b --batch 4 --seq 1024 -- --snapshot "$OUT/full-1b.snapshot.json"
probe full-1b-expandable llama-3.2-1b --batch 4 --seq 1024 -- --alloc-conf expandable_segments:True
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
G = 2**30
print(f"{'case':22} {'peak alloc':>11} {'peak resv':>10} {'context':>8} {'phase':>9}")
for n in ["default", "default-expandable", "full-1b", "full-1b-expandable"]:
    p = os.path.join(out, n + ".result.json")
    if not os.path.exists(p):
        lines = [l for l in open(os.path.join(out, n + ".stdout")).read().splitlines() if l.strip()]
        print(n, "no result file; last line:", lines[-1][:200] if lines else "(none)"); continue
    r = json.load(open(p))
    pk = r["peak"]
    print(f"{n:22} {pk['allocated_bytes']/G:11.2f} {pk['reserved_bytes']/G:10.2f} {pk['cuda_context_bytes']/G:8.2f} {pk['phase']:>9}")
for n in ["default", "full-1b"]:
    p = os.path.join(out, n + ".snapshot.json")
    if os.path.exists(p):
        s = json.load(open(p))
        print(n, "snapshot:", s["taken_at"], round(s["allocated_bytes"]/G, 2), "of step peak",
              round(s["step_peak_allocated_bytes"]/G, 2), "GiB;", s["live_blocks"], "live blocks,", len(s["segments"]), "segments")
PY
