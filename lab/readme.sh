#!/usr/bin/env bash
# One H200 call: the README's headline configuration (Llama-3.1-8B, LoRA r16 on every linear
# layer, batch 4 x 2048, bf16, AdamW) through the transformers engine as it ships today, with its
# per-phase attribution and its allocation timeline, three times (the spread of a real step), for
# the README's screenshots and docs/accuracy.md.
# Results: $OUT/readme.tar.xz (results, timeline of the first run, logs).
# Usage (device tool): bash lab/readme.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-readme
rm -rf "$W" && mkdir -p "$W"
source lab/common.sh
gpu_header >"$W/run.log" 2>&1
python3 - "$W" <<'PY'
import json, sys
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
json.dump(plan["l8b-bf16-lora16-b4s2048"]["request"], open(f"{sys.argv[1]}/request.json", "w"))
PY
for i in 1 2 3; do
    t0=$(date +%s.%N)
    extra=()
    [ "$i" = 1 ] && extra=(--timeline "$W/l8b-bf16-lora16-b4s2048.timeline.json")
    timeout 180 python3 probes/headroom_engine.py --request "$W/request.json" \
        --out "$W/l8b-bf16-lora16-b4s2048.run$i.json" "${extra[@]}" >"$W/run$i.log" 2>&1
    echo "run$i rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$W/run.log"
done
(cd "$W" && tar cJf "$OUT/readme.tar.xz" .)
ls -la "$OUT"
