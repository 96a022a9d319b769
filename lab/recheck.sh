#!/usr/bin/env bash
# One H200 call: the transformers engine as it ships now (the hrengine/ package, issue 25, and its
# loopback multi-rank launch, issue 33) run again on corpus configurations, each set against the
# corpus's own measurement of it (tests/data/corpus/h200.jsonl): one GPU full and LoRA, and two
# ranks sharing the GPU through headroom-probe (FSDP2 ZeRO-3, ZeRO-1 with autocast). The same
# stack on the same card allocates the same bytes, so every phase's peak allocated must match.
# Results under $OUT: build.log, run.log, results.jsonl, compare.txt.
# Usage: bash lab/run recheck   (ONLY=name,name... to choose other corpus entries)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WORK=/tmp/headroom-recheck
rm -rf "$WORK" && mkdir -p "$WORK"
# headroom-probe's driver (no LibTorch needed for the transformers engine), for the rank runs.
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
    -DHEADROOM_BUILD_BENCH=OFF && cmake --build build-gpu --target headroom-probe) >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
ONLY=${ONLY:-l1b-bf16-full-adamw-b4s1024,l1b-bf16-lora16-b4s2048,share2-l1b-bf16-full-adamw-b2s1024-z3,share2-l1b-ampbf16-full-adamw-b2s1024-z1}
python3 lab/corpus.py run --out "$WORK" --only "$ONLY" --deadline-s "${DEADLINE_S:-420}" >"$OUT/run.log" 2>&1
cp "$WORK/results.jsonl" "$OUT/" 2>/dev/null
python3 - "$WORK/results.jsonl" tests/data/corpus/h200.jsonl >"$OUT/compare.txt" 2>&1 <<'PY'
import json, sys
def load(path):
    out = {}
    for line in open(path):
        d = json.loads(line)
        out[d["name"]] = d
    return out
new, old = load(sys.argv[1]), load(sys.argv[2])
def peaks(r):
    """(rank, phase) -> the steady step's peak allocated, the worst step after the warm-up."""
    out = {}
    for rank in r.get("ranks") or [{"rank": 0, "phases": r.get("phases", [])}]:
        for p in rank.get("phases", []):
            if p.get("step", 0) >= r.get("warmup_steps", 1):
                k = (rank.get("rank", 0), p["phase"])
                out[k] = max(out.get(k, 0), p["peak_allocated_bytes"])
    return out
bad = 0
for name, n in sorted(new.items()):
    o = old.get(name)
    if n.get("exit") != 0 or not o:
        print(f"{name}: exit {n.get('exit')}, corpus entry {'found' if o else 'missing'}")
        bad += 1
        continue
    pn, po = peaks(n["result"]), peaks(o["result"])
    for k in sorted(set(pn) | set(po)):
        a, b = pn.get(k), po.get(k)
        same = a == b
        bad += 0 if same else 1
        d = "" if same or not a or not b else f" ({100.0 * (a - b) / b:+.4f}%)"
        print(f"{name} rank {k[0]} {k[1]:<10} now {a} corpus {b} {'same' if same else 'DIFFERS'}{d}")
print(f"{len(new)} runs, {bad} differences")
PY
cat "$OUT/compare.txt"
tail -5 "$OUT/run.log"
grep -q " 0 differences" "$OUT/compare.txt"
