#!/usr/bin/env bash
# H200 call: build the CUDA probe, then run the LibTorch engine on corpus configurations named in
# $1 (comma-separated), requests taken from lab/corpus-plan.json. Results under $OUT:
# run.log and results.tar.xz (<name>.libtorch.json each), compared with the corpus by
# scripts/compare-probe.py (since replaced by headroom-cli compare).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
W=/tmp/probe-runs
rm -rf "$W" && mkdir -p "$W"
source lab/build-probe.sh
gpu_build_probe "$OUT/build.log" > "$OUT/run.log" 2>&1 || { tail -20 "$OUT/run.log"; exit 1; }
python3 - "$1" "$W" >> "$OUT/run.log" 2>&1 <<'PY'
import json, subprocess, sys, time
names, w = sys.argv[1].split(","), sys.argv[2]
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
for n in names:
    json.dump(plan[n]["request"], open(f"{w}/{n}.request.json", "w"))
    t = time.time()
    p = subprocess.run(["build-gpu/probes/headroom-probe", "--engine", "libtorch", "--request", f"{w}/{n}.request.json",
                        "--out", f"{w}/{n}.libtorch.json"], capture_output=True, text=True, timeout=300)
    print(f"{n}: rc={p.returncode} {time.time() - t:.1f}s {p.stderr[-300:] if p.returncode else ''}", flush=True)
PY
(cd "$W" && tar cJf "$OUT/results.tar.xz" *.json)
tail -n 12 "$OUT/run.log"
