#!/usr/bin/env bash
# On the GPU machine: out-of-memory results for the tests (the GUI shows them as results).
# Builds the probe, runs the two OOM cases and a 1B step with --snapshot, and packs everything into
# $OUT/results.tar.gz (tests/data/h200/*-oom.result.json and llama1b-* come from this script).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"; W=$(mktemp -d)
cd "$(dirname "$0")/.."
source lab/build-probe.sh
gpu_build_probe "$W/build.log" || exit 1
for c in "llama8b-full-b16s4096-oom llama-3.1-8b --batch 16 --seq 4096" "llama70b-full-b1s1024-oom llama-3.1-70b --batch 1 --seq 1024" \
         "llama1b-full-b4s1024 llama-3.2-1b --batch 4 --seq 1024"; do
    set -- $c; n=$1; shift
    lab/probe-request.py "$@" > "$W/$n.request.json"
    build-gpu/probes/headroom-probe --request "$W/$n.request.json" --out "$W/$n.result.json" --snapshot "$W/$n.snapshot.json" \
        > "$W/$n.stdout" 2> "$W/$n.stderr"; echo "$n rc=$? $(tail -c 200 "$W/$n.stderr")"
done
tar -C "$W" -czf "$OUT/results.tar.gz" . && ls -la "$OUT"
