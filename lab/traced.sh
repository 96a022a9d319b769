#!/usr/bin/env bash
# The traced estimate against real steps (issue 26): for model types without a hand-written row
# (and two with one, as controls), the transformers engine's --trace (fake tensors) and a real
# measured step of the same request, each with its allocator timeline. The trace runs twice:
# with the GPU visible, and with CUDA_VISIBLE_DEVICES="" (a machine without a GPU), and must give
# the same stream. Also times the trace of Llama-3.1-8B LoRA b4x2048 without a GPU.
# Results under $OUT: cases.jsonl (one line per case: what ran, exit codes, times), and per case
# NAME.request.json, NAME.real.json (result), NAME.real-tl.json, NAME.trace-tl.json,
# NAME.trace-nogpu-tl.json, NAME.log. Usage: bash lab/run traced [ONLY=name,name]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 lab/traced.py --out "$OUT" --deadline-s "${DEADLINE_S:-500}" ${ONLY:+--only "$ONLY"}
# the device tool brings back few files: one archive of the timelines and logs
tar -C "$OUT" -cJf /tmp/traced.tar.xz --exclude=versions.txt --exclude=cases.jsonl . &&
    find "$OUT" -type f ! -name versions.txt ! -name cases.jsonl -delete && mv /tmp/traced.tar.xz "$OUT/"
