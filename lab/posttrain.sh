#!/usr/bin/env bash
# Reward models, KTO and ORPO as TRL runs them (issue 29): the transformers engine's step with
# TRL's own loss (RewardTrainer.compute_loss on AutoModelForSequenceClassification, KTOTrainer's
# _compute_loss with the KL batch and the reference as the disabled adapter, a copy or none,
# ORPOTrainer.compute_loss) on the H200 with its allocator timeline. TRL travels as source under
# shared/trl (`datasets` is stood in for, the step reads no dataset).
# Results under $OUT: cases.jsonl, and per case NAME.request.json, NAME.json (result), NAME.log,
# NAME.tl.json (timeline), all packed in SET.tar.xz (what comes back is few files).
# Usage: [ONLY=a,b] [SET=posttrain|heldout|dpo|grpo] bash lab/run posttrain (lab/dpo.sh: SET=dpo)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/shared${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import trl, sys; print('trl', getattr(trl, '__version__', '?'))" >>"$OUT/versions.txt" 2>&1
SET=${SET:-posttrain}
python3 lab/posttrain.py --set "$SET" --out "$OUT" --deadline-s "${DEADLINE_S:-540}" ${ONLY:+--only "$ONLY"}
tar -C "$OUT" -cJf "/tmp/$SET.tar.xz" --exclude=versions.txt --exclude=cases.jsonl . &&
    find "$OUT" -type f ! -name versions.txt ! -name cases.jsonl -delete && mv "/tmp/$SET.tar.xz" "$OUT/"
