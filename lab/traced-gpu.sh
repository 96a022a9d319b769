#!/usr/bin/env bash
# The trace (--trace, fake tensors) of each request of tests/data/h200/traced-2026-12-03/real.tar.xz
# with the GPU visible (nothing is allocated on it; the autograd engine needs a device to exist),
# four at a time, and of Llama-3.1-8B LoRA b4x2048 for its time. Results under $OUT: trace.tar.xz
# (NAME.trace-tl.json, NAME.trace.log), times.jsonl, compare.txt (the traced estimates against the
# real steps in real.tar.xz, lab/traced_compare.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
# headroom-cli, to replay each trace (lab/traced_compare.py): core only, no GUI, no tests.
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
    -DHEADROOM_BUILD_BENCH=OFF && cmake --build build-gpu --target headroom-cli headroom-probe) >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
W=/tmp/headroom-traced && rm -rf "$W" && mkdir -p "$W/in" "$W/out"
tar -C "$W/in" -xJf tests/data/h200/traced-2026-12-03/real.tar.xz --wildcards '*.request.json' '*.real.json'
# the 8B LoRA step as measured for the README (the same request)
cp tests/data/h200/readme-2026-12-02/l8b-bf16-lora16-b4s2048.run1.json "$W/in/speed-l8b-lora-b4s2048.real.json"
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
l8b = json.load(open("resources/models/llama-3.1-8b.json"))
c = json.load(open(os.path.join(w, "in", "llama-full.request.json")))["config"]
c.update({"finetune": "lora", "micro_batch": 4, "seq_len": 2048,
          "lora": {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}})
json.dump({"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "model": l8b, "config": c},
          open(os.path.join(w, "in", "speed-l8b-lora-b4s2048.request.json"), "w"))
PY
ls "$W"/in/*.request.json | xargs -P 4 -I{} sh -c 'n=$(basename {} .request.json); s=$(date +%s%N);
  timeout 150 python3 probes/headroom_engine.py --request {} --trace --timeline '"$W"'/out/$n.trace-tl.json >/dev/null 2>'"$W"'/out/$n.trace.log; rc=$?;
  echo "{\"name\": \"$n\", \"rc\": $rc, \"wall_ms\": $(( ($(date +%s%N) - s) / 1000000 ))}" >>'"$W"'/times.jsonl'
cp "$W/times.jsonl" "$OUT/"
cp "$W"/in/*.real.json "$W/out/" && python3 lab/traced_compare.py "$W/out" build-gpu/app/headroom-cli | tee "$OUT/compare.txt"
tar -C "$W/out" -cJf "$OUT/trace.tar.xz" .
cat "$OUT/times.jsonl"
