#!/usr/bin/env bash
# H200 call: corpus entries through the transformers engine with bitsandbytes (built from source
# in the carried build-bnb/) and headroom-probe (built in build-gpu beside it, for the entries
# whose ranks share the GPU): lab/bnb.sh with WITH_PROBE=1.
# Usage (device tool, carry ["build-bnb"]): bash lab/holdout.sh NAME,NAME,... [deadline_s]
WITH_PROBE=1 exec bash "$(dirname "$0")/bnb.sh" "$@"
