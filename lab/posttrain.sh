#!/usr/bin/env bash
# Reward models, KTO and ORPO as TRL runs them (issue 29): the transformers engine's step with
# TRL's own loss (RewardTrainer.compute_loss on AutoModelForSequenceClassification, KTOTrainer's
# _compute_loss with the KL batch and the reference as the disabled adapter, a copy or none,
# ORPOTrainer.compute_loss) on the H200 with its allocator timeline. TRL travels as source under
# shared/trl (`datasets` is stood in for, the step reads no dataset).
# Results under $OUT: cases.jsonl, and per case NAME.request.json, NAME.json (result), NAME.log,
# NAME.tl.json (timeline), all packed in SET.tar.xz (what comes back is few files).
# Usage: [ONLY=a,b] [SET=posttrain|heldout|dpo|grpo|combos|vl] bash lab/run posttrain (lab/dpo.sh: SET=dpo;
# combos carries build-bnb)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/shared${PYTHONPATH:+:$PYTHONPATH}"
SET=${SET:-posttrain}
if [ "$SET" = combos ]; then # QLoRA: bitsandbytes from the carried build-bnb/
    source lab/common.sh
    build_bnb "$OUT/bnb-build.log" || { echo "BNB BUILD FAILED"; tail -n 40 "$OUT/bnb-build.log"; exit 1; }
    python3 -c "import bitsandbytes as b; print('bitsandbytes', b.__version__)" >>"$OUT/versions.txt" 2>&1
fi
python3 -c "import trl, sys; print('trl', getattr(trl, '__version__', '?'))" >>"$OUT/versions.txt" 2>&1
python3 lab/posttrain.py --set "$SET" --out "$OUT" --deadline-s "${DEADLINE_S:-540}" ${ONLY:+--only "$ONLY"}
# What comes back is at most 8 files of 16 MiB: the results (small) in one archive, the
# timelines in another, split into 15 MiB parts where it is larger (cat SET-timelines.tar.xz.* | tar -xJ)
cd "$OUT" || exit 1
# xz on every core: one GRPO timeline is 74 MB, and single-threaded packing ran the call out (2026-12-05)
tar -cf - --exclude='*.tl.json' --exclude=versions.txt --exclude=cases.jsonl . | xz -T0 -6 >"/tmp/$SET.tar.xz"
timelines=$(ls ./*.tl.json 2>/dev/null)
[ -n "$timelines" ] && tar -cf - $timelines | xz -T0 -6 >"/tmp/$SET-timelines.tar.xz"
find "$OUT" -type f ! -name versions.txt ! -name cases.jsonl -delete
mv "/tmp/$SET.tar.xz" "$OUT/"
[ -n "$timelines" ] && split -b 15M -d -a 1 "/tmp/$SET-timelines.tar.xz" "$OUT/$SET-timelines.tar.xz."
ls -la "$OUT"
