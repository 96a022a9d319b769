#!/usr/bin/env python3
"""A user's memory snapshot, made the way PyTorch's docs say (torch.cuda.memory._record_memory_history
then _dump_snapshot), around a plain Transformers training loop: Llama-3.2-1B shapes cut to two
layers, bf16, AdamW, batch 2 x 512, three steps. For the Timeline tab's snapshot import test.

    python3 lab/snapshot.py OUT.pickle
"""
import json, os, sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cfg = json.load(open(os.path.join(ROOT, "resources", "models", "llama-3.2-1b.json")))["config"]
cfg["num_hidden_layers"] = 2
config = AutoConfig.for_model(**cfg)
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(0, cfg["vocab_size"], (2, 512), device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
torch.cuda.memory._record_memory_history(enabled=None)
print("peak allocated", torch.cuda.max_memory_allocated(), "reserved", torch.cuda.max_memory_reserved())
