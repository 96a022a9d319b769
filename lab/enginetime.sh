#!/usr/bin/env bash
# Where the transformers engine's time goes (issue 27): each configuration run through
# probes/headroom_engine.py several times, from launch to the result line and to exit, with the
# engine's own budget (engine_info.timing), one cProfile and one -X importtime. Bytecode is
# cached under a prefix, as a normal install has it (the lab machine sets PYTHONDONTWRITEBYTECODE).
# Results under $OUT: timing.jsonl, prof-NAME.txt, importtime.txt. Usage: bash lab/enginetime.sh [--runs N] [--only a,b]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
python3 lab/enginetime.py --out "$OUT" "$@"
