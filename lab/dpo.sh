#!/usr/bin/env bash
# DPO as TRL runs it (issue 29): the transformers engine's DPO step (TRL's own
# DPOTrainer._compute_loss, the reference as the disabled adapter, a frozen copy, or none) on the
# H200 with its allocator timeline, and a supervised control. TRL travels as source under
# shared/trl (its GitHub tree; `datasets` is stood in for, the step reads no dataset).
# Results under $OUT: cases.jsonl, and per case NAME.request.json, NAME.json (result), NAME.log,
# NAME.tl.json (timeline), packed in dpo.tar.xz. Usage: bash lab/run dpo [ONLY=a,b]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/shared${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import trl, sys; print('trl', getattr(trl, '__version__', '?'))" >>"$OUT/versions.txt" 2>&1
python3 lab/posttrain.py --set dpo --out "$OUT" --deadline-s "${DEADLINE_S:-450}" ${ONLY:+--only "$ONLY"}
tar -C "$OUT" -cJf /tmp/dpo.tar.xz --exclude=versions.txt --exclude=cases.jsonl . &&
    find "$OUT" -type f ! -name versions.txt ! -name cases.jsonl -delete && mv /tmp/dpo.tar.xz "$OUT/"
