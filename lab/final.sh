#!/usr/bin/env bash
# The last H200 call of a session (lab/final.py says what it measures). Results under
# $OUT/final: run.log, ranks/<job>/{rank0.json,rank1.json,timeline.json,timeline.json.rank1},
# libtorch_vs_engine.json, timing.json, build.log.
set -uo pipefail
cd "$(dirname "$0")/.."
pkill -f headroom_engine.py 2>/dev/null; sleep 1
OUT=${OUT:-/tmp/headroom-out}
F="$OUT/final"
mkdir -p "$F"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__)"
} >"$F/run.log" 2>&1
source lab/build-probe.sh
(gpu_build_probe "$F/build.log" >>"$F/run.log" 2>&1) &
BUILD=$!
python3 lab/final.py --out "$F" --deadline-s "${DEADLINE_S:-380}" --build-pid "$BUILD" > "$OUT/final.log" 2>&1
wait "$BUILD" 2>/dev/null
# One file back: the device tool returns a limited number of files.
(cd "$OUT" && tar cJf final.tar.xz final && rm -rf final)
tail -32 "$OUT/final.log"
