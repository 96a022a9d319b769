#!/usr/bin/env bash
# The last rows of issue 26 (DeepSeek-V4; Nemotron-H and the Gemma 4 composite have steps in
# traced-2026-12-04): the modeling sources of the installed Transformers for the three types
# (what the rows follow), DeepSeek-V4's defaults, then lab/traced.py's cases for deepseek_v4 at both
# shapes (real steps and traces). Results: $OUT/src/*.py, $OUT/defaults.json, $OUT/small/, $OUT/alt/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT/src" "$OUT/small" "$OUT/alt"
python3 - "$OUT" <<'PY'
import json, os, shutil, sys, transformers
from transformers import AutoConfig
out = sys.argv[1]
root = os.path.dirname(transformers.__file__)
for t in ("deepseek_v4", "nemotron_h", "gemma4"):
    d = os.path.join(root, "models", t)
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.endswith(".py") and ("modeling" in f or "modular" in f or "configuration" in f):
            shutil.copy(os.path.join(d, f), os.path.join(out, "src", f))
defaults = {}
for t in ("deepseek_v4", "nemotron_h", "gemma4"):
    try:
        defaults[t] = AutoConfig.for_model(t).to_dict()
    except Exception as e:
        defaults[t] = repr(e)
json.dump(defaults, open(os.path.join(out, "defaults.json"), "w"), indent=1, default=str)
PY
tar -C "$OUT" -cJf "$OUT/src.tar.xz" src && rm -rf "$OUT/src"
# the cases without lab/traced.sh's build: the comparison runs on the development machine
# (python3 lab/traced_compare.py DIR build/dev/app/headroom-cli)
export PYTHONUNBUFFERED=1
for size in small alt; do
    SIZE=$size SPEED_RUNS=0 timeout "${LIMIT:-150}" python3 lab/traced.py --out "$OUT/$size" --deadline-s 100 --jobs 3 --only deepseek_v4
    tar -C "$OUT/$size" -cJf "/tmp/traced-$size.tar.xz" --exclude=cases.jsonl . && find "$OUT/$size" -type f ! -name cases.jsonl -delete &&
        mv "/tmp/traced-$size.tar.xz" "$OUT/$size/traced.tar.xz"
done
