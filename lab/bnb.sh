#!/usr/bin/env bash
# On the lent H200: bitsandbytes built from source (the machine has no PyPI), then the corpus
# entries that need it (QLoRA, 8-bit and paged optimizers) and the activation-offload entries,
# through the transformers engine. build-bnb/ holds the bitsandbytes source tree
# (git archive HEAD CMakeLists.txt csrc bitsandbytes pyproject.toml) and travels as a carried path.
# Results under $OUT: run.log, bnb-build.log, results.jsonl.xz, timelines.tar.xz, logs.tar.xz.
# With WITH_PROBE=1, headroom-probe is built in build-gpu beside it (lab/holdout.sh).
# Usage (device tool): bash lab/bnb.sh NAME,NAME,... [deadline_s]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
LOG="$OUT/run.log"
export PYTHONUNBUFFERED=1
WORK=/tmp/headroom-bnb
rm -rf "$WORK" && mkdir -p "$WORK"
date -u >"$LOG"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$LOG" 2>&1
if [ "${WITH_PROBE:-0}" = 1 ]; then # entries whose ranks share the GPU need headroom-probe
    source lab/build-probe.sh
    (gpu_build_probe "$OUT/probe-build.log" >"$WORK.probe-build.rc" 2>&1) &
    probe_pid=$!
fi
t0=$(date +%s)
source lab/common.sh
build_bnb "$OUT/bnb-build.log" || { echo "BNB BUILD FAILED" | tee -a "$LOG"; tail -n 40 "$OUT/bnb-build.log"; exit 1; }
echo "bitsandbytes built in $(( $(date +%s) - t0 )) s" >>"$LOG"
if [ -n "${probe_pid:-}" ]; then
    wait "$probe_pid"
    cat "$WORK.probe-build.rc" >>"$LOG"
fi
python3 - >>"$LOG" 2>&1 <<'PY' || { echo "BNB IMPORT FAILED" | tee -a "$LOG"; tail -n 30 "$LOG"; exit 1; }
import torch, bitsandbytes as bnb
print("bitsandbytes", bnb.__version__, bnb.__file__)
w = torch.nn.Linear(256, 256).cuda().half()
q = bnb.nn.Linear4bit(256, 256, compute_dtype=torch.bfloat16, quant_type="nf4")
q.weight = bnb.nn.Params4bit(w.weight.data.cpu(), requires_grad=False, quant_type="nf4")
q = q.cuda()
x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
print("nf4 matmul ok", tuple(q(x).shape))
PY
python3 lab/corpus.py run --out "$WORK" --only "$1" --deadline-s "${2:-300}" >>"$LOG" 2>&1
tail -n 30 "$LOG"
xz -T16 -6 -c "$WORK/results.jsonl" >"$OUT/results.jsonl.xz"
(cd "$WORK" && tar cf - timelines | xz -T16 -6 >"$OUT/timelines.tar.xz")
(cd "$WORK" && tar cJf "$OUT/logs.tar.xz" req/*.log)
ls -la "$OUT"
