#!/usr/bin/env bash
# The LibTorch probe's own allocator traces (HEADROOM_PROBE_TRACE) for five configurations whose
# early stop the allocator model could not vouch for: $OUT/trace.tar.xz (what
# tests/data/h200/earlystop-2026-12-02/probe-traces.tar.xz holds).
set -uo pipefail
cd "$(dirname "$0")/.." 2>/dev/null || true
OUT=${OUT:-/tmp/headroom-out}
F="$OUT/trace"; mkdir -p "$F"
source lab/common.sh; gpu_header > "$F/run.log" 2>&1
source lab/build-probe.sh
gpu_build_probe "$F/build.log" >> "$F/run.log" 2>&1 || { tail -30 "$F/build.log"; exit 1; }
python3 - "$F" <<'PY'
import json, os, subprocess, sys, time
F = sys.argv[1]
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
for n in ["l8b-bf16-lora16-b4s2048", "l8b-bf16-full-adamw-b1s1024", "l1b-ampbf16-lora16-b4s1024", "l1b-bf16-qlora16-b4s1024", "l8b-bf16-lora16-b4s2048-ckpt"]:
    req = dict(plan[n]["request"]); req["engine"] = "libtorch"
    rp = f"{F}/{n}.request.json"; json.dump(req, open(rp, "w"))
    env = dict(os.environ, HEADROOM_PROBE_TRACE=f"{F}/{n}.trace.json")
    t = time.time()
    p = subprocess.run(["build-gpu/probes/headroom-probe", "--request", rp, "--out", f"{F}/{n}.json", "--device", "cuda"], capture_output=True, text=True, env=env)
    print(n, p.returncode, round(time.time() - t, 2), p.stderr[-300:].strip(), flush=True)
PY
(cd "$OUT" && tar cJf trace.tar.xz trace && rm -rf trace)
ls -la "$OUT"
