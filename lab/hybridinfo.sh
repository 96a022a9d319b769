#!/usr/bin/env bash
# What Transformers builds for the hybrid and composite types of recent recipes (Qwen3.5 and its
# MoE, Gemma 4, Nemotron-H, the newest DeepSeek): the class AutoModelForCausalLM makes from each
# config (on the meta device), its parameter count, whether a composite one carries its vision
# tower, the configuration classes' defaults, and which fast kernels are installed (without them
# Transformers runs its torch fallbacks). Results: $OUT/hybridinfo.json.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 lab/hybridinfo.py "${OUT:-/tmp/headroom-out}/hybridinfo.json"
