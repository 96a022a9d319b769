#!/usr/bin/env bash
# Note [Traced ranks] on the real stack: FSDP2 traced as rank 0 of N over the fake process group.
# - Llama-3.2-1B b2 x 1024 at two ranks, the four configurations of tests/data/h200/fsdp-2026-12-02
#   (ZeRO-3 bf16 full and LoRA, ZeRO-3 and ZeRO-2 amp-bf16), whose real rank streams are committed;
# - Llama-3.1-70B full fine-tuning, ZeRO-3 over 8 ranks, b1 x 2048, timed on all cores and pinned to two.
# CASES="a b" runs only those of the four. Results under $OUT: tracefsdp.jsonl (per case: rc, seconds, the engine's last lines) and
# tracefsdp.tar.xz (the timelines). Usage: bash lab/run tracefsdp
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
W=/tmp/headroom-tracefsdp
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
plan = {j["name"]: j for j in json.load(open("lab/corpus-plan.json"))["jobs"]}
for n in ["share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
          "share2-l1b-ampbf16-full-adamw-b2s1024-z3", "share2-l1b-ampbf16-full-adamw-b2s1024-z2"]:
    req = json.loads(json.dumps(plan[n]["request"]))
    req["config"]["world_size"] = 2
    json.dump(req, open(f"{w}/{n}.request.json", "w"))
m = json.load(open("resources/models/llama-3.1-70b.json"))
cfg = dict(plan["share2-l1b-bf16-full-adamw-b2s1024-z3"]["request"]["config"])
cfg.update({"world_size": 8, "zero_stage": 3, "micro_batch": 1, "seq_len": 2048, "grad_accum": 1})
json.dump({"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "model": m, "config": cfg},
          open(f"{w}/l70b-full-z3-ws8-b1s2048.request.json", "w"))
PY
one() {  # name, cpus (or "all")
    local n=$1 cpus=$2 pre=()
    [ "$cpus" = all ] || pre=(taskset -c "$cpus")
    local t0; t0=$(date +%s.%N)
    timeout "${LIMIT:-120}" "${pre[@]}" python3 probes/headroom_engine.py --request "$W/${n%%@*}.request.json" --trace --trace-ranks \
        --timeline "$W/$n.trace-tl.json" >"$W/$n.log" 2>&1
    local rc=$?
    python3 - "$n" "$rc" "$t0" "$cpus" "$W/$n.log" "$W/$n.trace-tl.json" <<'PY' | tee -a "$OUT/tracefsdp.jsonl"
import json, os, sys, time
n, rc, t0, cpus, log, tl = sys.argv[1:]
r = {"name": n, "rc": int(rc), "s": round(time.time() - float(t0), 2), "cpus": cpus,
     "log": open(log).read()[-1500:]}
if os.path.exists(tl):
    t = json.load(open(tl))
    r["timing"], r["sharding"] = t.get("timing"), t["engine_info"].get("sharding")
    live = peak = 0; size = {}
    for e in t["events"]:
        if e[0] == 0: size[e[1]] = e[2]; live += e[2]; peak = max(peak, live)
        elif e[0] == 1: live -= size.pop(e[1], 0)
    r["peak_allocated_bytes"] = peak
    r["streams"] = sorted({e[6] for e in t["events"] if e[0] == 0 and len(e) > 6})
print(json.dumps(r))
PY
}
for n in ${CASES:-share2-l1b-bf16-full-adamw-b2s1024-z3 share2-l1b-bf16-lora16-b2s1024-z3 \
         share2-l1b-ampbf16-full-adamw-b2s1024-z3 share2-l1b-ampbf16-full-adamw-b2s1024-z2}; do
    one "$n" all
done
LIMIT=150 one l70b-full-z3-ws8-b1s2048 all
[ "${TWO_CORES:-0}" = 1 ] && LIMIT=150 one "l70b-full-z3-ws8-b1s2048@2cores" 0,1
rm -f "$W"/*@2cores.trace-tl.json
tar -C "$W" -cJf "$OUT/tracefsdp.tar.xz" .
