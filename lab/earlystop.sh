#!/usr/bin/env bash
# The LibTorch probe's early stop, validated on the H200, and held-out MoE LoRA runs
# (lab/earlystop.py says what each part measures). Results: $OUT/earlystop.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
source lab/common.sh
OUT=${OUT:-/tmp/headroom-out}
F="$OUT/earlystop"
mkdir -p "$F"
gpu_header >"$F/run.log" 2>&1
source lab/build-probe.sh
(gpu_build_probe "$F/build.log" >>"$F/run.log" 2>&1) &
BUILD=$!
python3 lab/earlystop.py --out "$F" --deadline-s "${DEADLINE_S:-520}" --build-pid "$BUILD" "$@" > "$OUT/earlystop.log" 2>&1
wait "$BUILD" 2>/dev/null
(cd "$OUT" && tar cJf earlystop.tar.xz earlystop && rm -rf earlystop)
tail -60 "$OUT/earlystop.log"
