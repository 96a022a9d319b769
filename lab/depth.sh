#!/usr/bin/env bash
# Note [Traced depth] on the real stack: every case traced extrapolated and at full depth, the two
# timelines compared event for event, and Llama-3.1-8B LoRA b4x2048 timed both ways on two cores.
# Results under $OUT: depth.jsonl. TYPES=llama,qwen3 runs only those types.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 lab/depth.py --out "$OUT"
rm -f "$OUT"/*.request.json
