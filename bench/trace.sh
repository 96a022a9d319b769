#!/usr/bin/env bash
# The trace's own cost (issue 26): headroom-probe --engine transformers --trace of a Llama-3.1-8B
# shaped model (32 layers, hidden 4096, 14336, 128256 vocabulary; the plain-torch factory of the
# engine tests, tests/data/engine/tinylm.py), LoRA-free full fine-tuning at b4 x s2048, bf16, on
# this machine's Python (default Debian's python3-torch). Fake tensors on the CPU: what is timed is
# the dispatch and the bookkeeping, not Transformers. Usage: bash bench/trace.sh [BUILD_DIR]
# (farm-bench when installed, else three timed runs). BY_DEPTH=1: Note [Traced depth]'s
# extrapolation (--trace-by-depth) paired against the full trace (farm-bench --vs).
# docs/performance.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/dev}
PY=${HEADROOM_PYTHON:-/usr/bin/python3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat >"$W/req.json" <<'JSON'
{"schema_version": 1, "kind": "probe_request", "steps": 1, "device": "cpu",
 "model": {"headroom": {"id": "l8b-shape", "name": "Llama-3.1-8B shape"},
           "config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
                      "max_position_embeddings": 131072}},
 "config": {"precision": "bf16", "optimizer": "adamw", "optimizer_impl": "for-loop", "finetune": "full",
            "micro_batch": 4, "seq_len": 2048, "grad_accum": 1, "grad_checkpointing": false, "attention": "sdpa"}}
JSON
cmd=(env HEADROOM_PYTHON="$PY" "$BUILD/probes/headroom-probe" --engine transformers --trace --request "$W/req.json"
     --timeline "$W/tl.json" --model-factory tests/data/engine/tinylm.py)
"${cmd[@]}" >/dev/null # once, checked: a refused request must not be timed
if [ "${BY_DEPTH:-0}" = 1 ]; then
    "${cmd[@]}" --trace-by-depth >/dev/null
    farm-bench -n 5 --timeout 600 --vs "${cmd[*]}" -- "${cmd[@]}" --trace-by-depth
elif command -v farm-bench >/dev/null; then
    farm-bench -n 5 --timeout 300 -- "${cmd[@]}"
else
    for i in 1 2 3; do /usr/bin/time -f "%e s wall, %M KiB peak" "${cmd[@]}" >/dev/null; done
fi
