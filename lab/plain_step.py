#!/usr/bin/env python3
"""The plainest measurement of one training step, independent of headroom_engine.py: the
check that the engine's hooks, threads and bookkeeping change nothing it measures.

    python3 lab/plain_step.py --request R.json --out O.json

It builds the request's model with Transformers (+ PEFT), runs one warm-up step and the
request's measured steps -- `loss = model(input_ids=ids, labels=ids).loss; loss.backward();
opt.step(); opt.zero_grad(set_to_none=True)` -- and writes each phase's peak allocated and
reserved bytes. Full or LoRA fine-tuning, AdamW or SGD, bf16 or fp32 or amp-bf16, no
accumulation: the five configurations it is run on.
"""
import argparse
import json
import sys

import torch

if "--imports-first" in sys.argv:  # as a user's script does: every import at the top, before CUDA starts
    import peft  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--imports-first", action="store_true",
                    help="import Transformers and PEFT at the top, before CUDA (default: where first needed)")
    a = ap.parse_args()
    req = json.load(open(a.request))
    c = req["config"]
    hf = {k: v for k, v in req["model"]["config"].items()
          if k not in ("architectures", "model_type", "torch_dtype", "dtype", "use_cache")}
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model(req["model"]["config"]["model_type"], **hf)
    config.use_cache = False
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "amp-bf16": torch.float32}[c["precision"]]
    torch.manual_seed(0)
    torch.set_default_dtype(dtype)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=c["attention"])
    torch.set_default_dtype(torch.float32)
    if c["grad_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if c["finetune"] == "lora":
        from peft import LoraConfig, get_peft_model
        lora = c["lora"]
        model = get_peft_model(model, LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                                 target_modules=lora["targets"], task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=c["optimizer_impl"] == "foreach",
                                fused=True if c["optimizer_impl"] == "fused" else None)
    else:
        opt = torch.optim.SGD(params, lr=1e-3)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (c["micro_batch"], c["seq_len"]), generator=g).cuda()
    amp = c["precision"] == "amp-bf16"
    phases = [{"step": 0, "phase": "after_load", "peak_allocated_bytes": torch.cuda.memory_allocated(),
               "peak_reserved_bytes": torch.cuda.memory_reserved()}]

    def measured(step, name, fn):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        r = fn()
        torch.cuda.synchronize()
        phases.append({"step": step, "phase": name, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                       "peak_reserved_bytes": torch.cuda.max_memory_reserved()})
        return r

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            return model(input_ids=ids, labels=ids).loss

    for step in range(1 + req.get("steps", 2)):
        loss = measured(step, "forward", forward)
        measured(step, "backward", lambda l=loss: l.backward())
        del loss
        measured(step, "optimizer", lambda: opt.step())
        opt.zero_grad(set_to_none=True)
    json.dump({"kind": "plain_step", "phases": phases}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
