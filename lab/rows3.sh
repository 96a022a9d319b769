#!/usr/bin/env bash
# The last rows of issue 26 (DeepSeek-V4; Nemotron-H and the Gemma 4 composite have steps in
# traced-2026-12-04): the modeling sources of the installed Transformers for the three types
# (what the rows follow), DeepSeek-V4's defaults, then lab/traced.sh for deepseek_v4 at both
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
OUT="$OUT/small" ONLY=deepseek_v4 JOBS=3 SPEED_RUNS=0 DEADLINE_S=200 bash lab/traced.sh
OUT="$OUT/alt" SIZE=alt ONLY=deepseek_v4 JOBS=3 SPEED_RUNS=0 DEADLINE_S=150 bash lab/traced.sh
