#!/usr/bin/env python3
"""Print a headroom-probe request (docs/probe-protocol.md) for a built-in model preset.

Used by the GPU scripts, e.g.:
  lab/probe-request.py llama-3.1-8b --finetune lora --batch 4 --seq 2048 > r.json
"""
import argparse
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("model", help="preset id (resources/models/ID.json)")
p.add_argument("--finetune", default="full", choices=["full", "lora", "qlora"])
p.add_argument("--precision", default="bf16")
p.add_argument("--optimizer", default="adamw")
p.add_argument("--batch", type=int, default=1)
p.add_argument("--seq", type=int, default=2048)
p.add_argument("--ckpt", action="store_true", help="gradient checkpointing")
p.add_argument("--zero", type=int, default=0)
p.add_argument("--world-size", type=int, default=1)
p.add_argument("--device", default="cuda")
a = p.parse_args()
with open(os.path.join(ROOT, "resources", "models", a.model + ".json")) as f:
    model = json.load(f)
print(json.dumps({
    "schema_version": 1, "kind": "probe_request", "model": model, "steps": 2, "device": a.device,
    "config": {"precision": a.precision, "optimizer": a.optimizer, "optimizer_impl": "foreach",
               "finetune": a.finetune, "micro_batch": a.batch, "seq_len": a.seq,
               "grad_checkpointing": a.ckpt, "attention": "sdpa",
               "world_size": a.world_size, "zero_stage": a.zero,
               "lora": {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": ALL_LINEAR}}}))
