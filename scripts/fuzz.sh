#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz), built by the `fuzz` preset (clang, ASan + UBSan), each run
# over a copy of its committed corpus (tests/fuzz/corpus/<name>), so a run never edits the tree.
#   scripts/fuzz.sh --seconds 15      # CI: a short fixed time per harness
#   scripts/fuzz.sh --runs 1000000    # the issue's bar: a million executions per harness
#   scripts/fuzz.sh --runs 1000000 --merge   # ... then fold what they found back into the corpus
# Exits non-zero on the first finding; the crashing input is left under build/fuzz/findings.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
limit=(-max_total_time=15)
merge=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) limit=(-max_total_time="$2"); shift 2 ;;
        --runs) limit=(-runs="$2"); shift 2 ;;
        --merge) merge=1; shift ;;
        *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz >/dev/null
mkdir -p build/fuzz/findings
for t in model_config request result sheet event_line training_config trace; do
    work="build/fuzz/work/$t"
    rm -rf "$work" && mkdir -p "$work" && cp -r "tests/fuzz/corpus/$t/." "$work/"
    log="build/fuzz/$t.log"
    if ! "build/fuzz/tests/fuzz/fuzz_$t" "$work" "${limit[@]}" -max_len=65536 -rss_limit_mb=4096 -timeout=10 \
            -artifact_prefix="build/fuzz/findings/$t-" >"$log" 2>&1; then
        echo "fuzz.sh: fuzz_$t found a problem:" >&2
        grep -m5 -E "ERROR|escaped|multi-line|runtime error|SUMMARY" "$log" >&2 || tail -20 "$log" >&2
        exit 1
    fi
    echo "fuzz_$t: $(grep -E '^#[0-9]+' "$log" | tail -1 | awk '{print $1, "executions,", $3, $4, "cov"}'), clean"
    if [ "$merge" = 1 ]; then
        fresh="build/fuzz/merged/$t"
        rm -rf "$fresh" && mkdir -p "$fresh"
        "build/fuzz/tests/fuzz/fuzz_$t" -merge=1 -max_len=65536 "$fresh" "tests/fuzz/corpus/$t" "$work" >/dev/null 2>&1
        rm -rf "tests/fuzz/corpus/$t" && mv "$fresh" "tests/fuzz/corpus/$t"
    fi
done
