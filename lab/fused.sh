#!/usr/bin/env bash
# One H200 call: builds the CUDA probe, then lab/fused.py (HF's loss against the fused
# one). Everything comes back as $OUT/fused.tar.xz. A Liger Kernel source tree can be put on
# PYTHONPATH (the real library for the transformers engine); ENGINES picks the engines.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
F="$OUT/fused"
mkdir -p "$F"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__)"
} >"$F/run.log" 2>&1
source lab/build-probe.sh
gpu_build_probe "$F/build.log" >>"$F/run.log" 2>&1 && \
    python3 lab/fused.py --out "$F" --deadline-s "${DEADLINE_S:-200}" --engines "${ENGINES:-libtorch,transformers}" \
        >/dev/null 2>"$F/driver.err"
(cd "$OUT" && tar cJf fused.tar.xz fused && rm -rf fused)
echo "packed"; tar tJf "$OUT/fused.tar.xz" | wc -l
