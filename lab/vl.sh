#!/usr/bin/env bash
# Vision-language steps (issue 30): the transformers engine's step on the checkpoints'
# ForConditionalGeneration (Qwen2.5-VL, Qwen3-VL, Gemma 3, LLaVA 1.5; lab/vl.py says which cases)
# with images and video as the processor shapes them, on the H200 with allocator timelines:
# lab/posttrain.sh with SET=vl (results packed in vl.tar.xz). Usage: bash lab/run vl [ONLY=a,b]
SET=vl DEADLINE_S="${DEADLINE_S:-540}" exec bash "$(dirname "$0")/posttrain.sh" "$@"
