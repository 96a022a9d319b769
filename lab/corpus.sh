#!/usr/bin/env bash
# On the lent H200: the reference corpus through the transformers engine (lab/corpus.py),
# the plain-script twins, two ranks sharing the GPU through headroom-probe --engine transformers,
# and the library sources the estimator is read against. Results under $OUT:
#   run.log            environment, build and progress
#   results.jsonl.xz   one line per configuration (the engine's result, or its error)
#   timelines.tar.xz*  every allocation of each run (probe_timeline), split in 15 MiB parts
#   logs.tar.xz        each run's stderr
#   src.tar.xz         the installed Transformers / PEFT / PyTorch files the estimator follows
# Usage (device tool): bash lab/corpus.sh [--deadline-s S] [--skip-done results.jsonl] [--only a,b]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
LOG="$OUT/run.log"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WORK=/tmp/headroom-corpus
rm -rf "$WORK" && mkdir -p "$WORK"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm --format=csv
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__, peft.__version__)"
    python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|peft|accelerate|bitsandbytes|deepspeed|nvidia-ml-py) "
    nproc
} >"$LOG" 2>&1

# headroom-probe's driver (no LibTorch needed for the transformers engine), for the rank runs.
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
    -DHEADROOM_BUILD_BENCH=OFF && cmake --build build-gpu --target headroom-probe) >>"$LOG" 2>&1 &
BUILD=$!

# The sources behind the numbers, as installed.
python3 - "$WORK/src" <<'EOF' >>"$LOG" 2>&1
import os, shutil, sys, glob
import torch, transformers, peft
dst = sys.argv[1]
def grab(mod, pats):
    base = os.path.dirname(mod.__file__)
    for p in pats:
        for f in glob.glob(os.path.join(base, p)):
            rel = os.path.relpath(f, os.path.dirname(base))
            os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
            shutil.copy(f, os.path.join(dst, rel))
fams = "llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe gemma gemma2 gemma3 phi3 gpt_neox gpt2 olmo2 olmo3 starcoder2 deepseek_v2 deepseek_v3".split()
grab(transformers, [f"models/{f}/modeling_{f}.py" for f in fams] + [f"models/{f}/configuration_{f}.py" for f in fams] +
     ["loss/*.py", "optimization.py", "integrations/sdpa_attention.py", "integrations/moe.py", "integrations/hub_kernels.py",
      "modeling_layers.py", "masking_utils.py", "activations.py", "modeling_utils.py", "pytorch_utils.py", "trainer.py",
      "modeling_rope_utils.py", "utils/generic.py", "integrations/accelerate.py"])
grab(peft, ["tuners/lora/layer.py", "tuners/lora/model.py", "tuners/lora/config.py", "peft_model.py", "utils/other.py",
            "tuners/tuners_utils.py", "utils/integrations.py"])
grab(torch, ["optim/adamw.py", "optim/adam.py", "optim/_adafactor.py", "optim/sgd.py", "optim/optimizer.py",
             "utils/checkpoint.py", "distributed/fsdp/_fully_shard/*.py", "distributed/optim/zero_redundancy_optimizer.py",
             "nn/parallel/distributed.py", "amp/grad_scaler.py", "nn/modules/sparse.py", "nn/functional.py"])
print("sources copied")
EOF
(cd "$WORK" && tar cJf "$OUT/src.tar.xz" src) >>"$LOG" 2>&1

# Fail fast: two quick configurations first (unless an earlier run's results are given).
if [ -n "${SKIP_DONE:-}" ]; then
    cp "$SKIP_DONE" "$WORK/done.jsonl"
    wait $BUILD
    python3 lab/corpus.py run --out "$WORK" --skip-done "$WORK/done.jsonl" "$@" >>"$LOG" 2>&1
else
python3 lab/corpus.py run --out "$WORK" --only l1b-bf16-full-adamw-b4s1024,l1b-bf16-lora16-b4s2048 \
    --deadline-s 60 >>"$LOG" 2>&1
if ! grep -q '"exit": 0' "$WORK/results.jsonl" 2>/dev/null; then
    echo "SMOKE FAILED" | tee -a "$LOG"
    tail -c 6000 "$WORK"/req/*.log | tee -a "$LOG"
    exit 1
fi
wait $BUILD
python3 lab/corpus.py run --out "$WORK" --skip-done "$WORK/results.jsonl" "$@" >>"$LOG" 2>&1
fi
tail -n 40 "$LOG"

# Pack within the 8-file, 16 MiB limits.
xz -T16 -6 -c "$WORK/results.jsonl" >"$OUT/results.jsonl.xz"
(cd "$WORK" && tar cf - timelines | xz -T16 -6 >"$WORK/timelines.tar.xz")
split -b 15M -d "$WORK/timelines.tar.xz" "$OUT/timelines.tar.xz.part"
(cd "$WORK" && tar cJf "$OUT/logs.tar.xz" req/*.log)
ls -la "$OUT"
