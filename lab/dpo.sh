#!/usr/bin/env bash
# DPO as TRL runs it (issue 29): the transformers engine's DPO step (TRL's own
# DPOTrainer._compute_loss, the reference as the disabled adapter, a frozen copy, or none) on the
# H200 with its allocator timeline, and a supervised control: lab/posttrain.sh with SET=dpo
# (results packed in dpo.tar.xz). Usage: bash lab/run dpo [ONLY=a,b]
SET=dpo DEADLINE_S="${DEADLINE_S:-450}" exec bash "$(dirname "$0")/posttrain.sh" "$@"
