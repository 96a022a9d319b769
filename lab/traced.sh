#!/usr/bin/env bash
# The traced estimate against real steps (issue 26): for model types without a hand-written row
# (and two with one, as controls), full, LoRA and checkpointed, the transformers engine's --trace
# (fake tensors; the GPU visible, nothing allocated on it) alongside a real measured step of the
# same request, each with its allocator timeline. Also times the trace of Llama-3.1-8B LoRA
# b4x2048.
# Results under $OUT: cases.jsonl (one line per case: what ran, exit codes, times), and per case
# NAME.request.json, NAME.real.json (result), NAME.real-tl.json, NAME.trace-tl.json, NAME.log, in
# traced.tar.xz; compare.txt (lab/traced_compare.py). Usage: bash lab/run traced [ONLY=name,name]
# (LORA=0, CKPT=0 leave those cases out; JOBS=N runs N cases at a time; SPEED_RUNS=N 8B traces)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# headroom-cli, to replay each trace (lab/traced_compare.py): core only, no GUI, no tests.
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
    -DHEADROOM_BUILD_BENCH=OFF && cmake --build build-gpu --target headroom-cli headroom-probe) >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
python3 lab/traced.py --out "$OUT" --deadline-s "${DEADLINE_S:-500}" --jobs "${JOBS:-1}" ${ONLY:+--only "$ONLY"}
python3 lab/traced_compare.py "$OUT" build-gpu/app/headroom-cli | tee "$OUT/compare.txt"
# the device tool brings back few files: one archive of the timelines and logs
tar -C "$OUT" -cJf /tmp/traced.tar.xz --exclude=versions.txt --exclude=cases.jsonl --exclude=compare.txt . &&
    find "$OUT" -type f ! -name versions.txt ! -name cases.jsonl ! -name compare.txt -delete && mv /tmp/traced.tar.xz "$OUT/"
