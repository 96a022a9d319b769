#!/usr/bin/env python3
"""The reference corpus: real PyTorch + Transformers + PEFT training steps, measured by the
transformers engine (probes/headroom_engine.py) on a GPU, which the estimator and the LibTorch
engine are held to (tests/data/corpus/, tests/tst_accuracy.cpp).

    lab/corpus.py plan [--out lab/corpus-plan.json]      # here: configs + memory budgets
    lab/corpus.py run --plan P --out DIR [--jobs 8] [--deadline-s 540] [--only a,b]
    lab/corpus.py list

`plan` builds every request from the presets in resources/ and gives each a device-memory
budget from headroom-cli's estimate (x1.25 + 1.5 GiB), or a stated one for model types the
estimator does not know yet. `run` starts the engine once per configuration, each in its own
process, several at a time on one GPU while their budgets fit (each process has its own
caching allocator, so its peaks are its own); a configuration that runs out of memory next to
others is run again alone. Results go to DIR/results.jsonl, timelines to DIR/timelines/.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GIB = 1 << 30


def preset(model_id):
    for sub in ("models", "models-next"):
        p = os.path.join(ROOT, "resources", sub, model_id + ".json")
        if os.path.exists(p):
            return json.load(open(p))
    raise SystemExit(f"no preset {model_id}")


def spec(name, model, precision="bf16", optimizer="adamw", impl="foreach", finetune="full", batch=4, seq=1024,
         ga=1, ckpt=False, attention="sdpa", rank=16, targets=None, dropout=0.0, layers=None, budget_gib=None,
         alloc_conf=None, steps=2, timeline=True, attribution=True, offload=False, every=0, hf=None, as_model=None):
    """hf: keys of the preset's config.json replaced (a real checkpoint's values the preset leaves
    out, or another size of the family); as_model: (id, name) the result is filed under then."""
    return dict(hf=hf, as_model=as_model, name=name, model=model, precision=precision, optimizer=optimizer, impl=impl, finetune=finetune,
                batch=batch, seq=seq, ga=ga, ckpt=ckpt, attention=attention, rank=rank, targets=targets or ALL,
                dropout=dropout, layers=layers, budget_gib=budget_gib, alloc_conf=alloc_conf, steps=steps,
                timeline=timeline, attribution=attribution and not offload, offload=offload, every=every)


def specs():
    S = []
    a = S.append
    # Llama-3.2-1B: every setting (fast, 128k vocabulary).
    l1 = "llama-3.2-1b"
    a(spec("l1b-bf16-full-adamw-b4s1024", l1))
    a(spec("l1b-bf16-full-adamw-b4s1024-ckpt", l1, ckpt=True))
    a(spec("l1b-ampbf16-full-adamw-b4s1024", l1, precision="amp-bf16"))
    a(spec("l1b-ampfp16-full-adamw-b4s1024", l1, precision="amp-fp16"))
    a(spec("l1b-fp16-full-sgd-b4s1024", l1, precision="fp16", optimizer="sgd"))
    a(spec("l1b-fp32-full-adamw-b2s512", l1, precision="fp32", batch=2, seq=512))
    a(spec("l1b-bf16-full-sgd-b4s1024", l1, optimizer="sgd"))
    a(spec("l1b-bf16-full-sgdm-b4s1024", l1, optimizer="sgd-momentum"))
    a(spec("l1b-bf16-full-adafactor-b4s1024", l1, optimizer="adafactor"))
    a(spec("l1b-bf16-full-adafactor-b1s512", l1, optimizer="adafactor", batch=1, seq=512))
    a(spec("l1b-ampbf16-full-adafactor-b2s1024", l1, precision="amp-bf16", optimizer="adafactor", batch=2))
    a(spec("l1b-bf16-full-adamw-fused-b4s1024", l1, impl="fused"))
    a(spec("l1b-bf16-full-adamw-forloop-b4s1024", l1, impl="for-loop"))
    a(spec("l1b-bf16-full-adamw-b1s1024", l1, batch=1))
    a(spec("l1b-bf16-full-adamw-b8s1024", l1, batch=8))
    a(spec("l1b-bf16-full-adamw-b2s1024-eager", l1, batch=2, attention="eager"))
    a(spec("l1b-bf16-full-adamw-b4s1024-ga2", l1, ga=2))
    a(spec("l1b-bf16-full-adamw-b2s1024-ga4", l1, batch=2, ga=4))
    a(spec("l1b-bf16-full-adamw-b4s1024-ga2-ckpt", l1, ga=2, ckpt=True))
    a(spec("l1b-ampbf16-full-adamw-b2s1024-ga2", l1, precision="amp-bf16", batch=2, ga=2))
    a(spec("l1b-bf16-full-sgd-b4s1024-ga2", l1, optimizer="sgd", ga=2))
    a(spec("l1b-bf16-lora16-b4s2048", l1, finetune="lora", seq=2048))
    a(spec("l1b-bf16-lora16-b4s2048-ckpt", l1, finetune="lora", seq=2048, ckpt=True))
    a(spec("l1b-ampbf16-lora16-b4s1024", l1, precision="amp-bf16", finetune="lora"))
    a(spec("l1b-ampbf16-lora16-b4s1024-ckpt", l1, precision="amp-bf16", finetune="lora", ckpt=True))
    a(spec("l1b-ampfp16-lora16-b4s1024", l1, precision="amp-fp16", finetune="lora"))
    a(spec("l1b-fp32-lora16-b2s1024", l1, precision="fp32", finetune="lora", batch=2))
    a(spec("l1b-bf16-lora16-b4s1024-dropout", l1, finetune="lora", dropout=0.05))
    a(spec("l1b-bf16-lora64qv-b4s1024", l1, finetune="lora", rank=64, targets=["q_proj", "v_proj"]))
    a(spec("l1b-bf16-lora16-b4s1024-ga4", l1, finetune="lora", ga=4))
    a(spec("l1b-bf16-lora16-b2s1024-eager", l1, finetune="lora", batch=2, attention="eager"))
    a(spec("l1b-bf16-full-adamw-b1s16384-ckpt", l1, batch=1, seq=16384, ckpt=True))
    # Llama-3.1-8B and Llama-3.2-3B.
    l8 = "llama-3.1-8b"
    a(spec("l8b-bf16-lora16-b4s2048", l8, finetune="lora", seq=2048))
    a(spec("l8b-bf16-lora16-b4s2048-ckpt", l8, finetune="lora", seq=2048, ckpt=True))
    a(spec("l8b-bf16-lora16qv-b2s2048", l8, finetune="lora", batch=2, seq=2048, targets=["q_proj", "v_proj"]))
    a(spec("l8b-ampbf16-lora16-b1s1024", l8, precision="amp-bf16", finetune="lora", batch=1))
    a(spec("l8b-bf16-full-adamw-b1s1024", l8, batch=1))
    a(spec("l8b-bf16-full-adamw-b1s1024-ga2", l8, batch=1, ga=2))
    a(spec("l8b-bf16-full-adafactor-b1s1024", l8, optimizer="adafactor", batch=1))
    a(spec("l8b-bf16-full-sgd-b2s2048-ckpt", l8, optimizer="sgd", batch=2, seq=2048, ckpt=True))
    a(spec("l8b-bf16-lora16-b1s16384-ckpt", l8, finetune="lora", batch=1, seq=16384, ckpt=True))
    a(spec("l3b-bf16-full-adamw-b2s2048", "llama-3.2-3b", batch=2, seq=2048))
    a(spec("l3b-bf16-lora16-b2s2048-ga2", "llama-3.2-3b", finetune="lora", batch=2, seq=2048, ga=2))
    a(spec("l2-7b-bf16-lora16-b2s2048", "llama-2-7b", finetune="lora", batch=2, seq=2048))
    # Qwen2 / Qwen3.
    q05 = "qwen2.5-0.5b"
    a(spec("q05b-bf16-full-adamw-b8s1024", q05, batch=8))
    a(spec("q05b-ampbf16-full-adamw-b4s1024", q05, precision="amp-bf16"))
    a(spec("q05b-fp32-full-adamw-b4s512", q05, precision="fp32", seq=512))
    a(spec("q05b-bf16-full-adafactor-b4s1024", q05, optimizer="adafactor"))
    a(spec("q05b-bf16-full-adamw-b4s1024-ga2", q05, ga=2))
    a(spec("q05b-bf16-lora16-b4s2048", q05, finetune="lora", batch=4, seq=2048))
    a(spec("q05b-bf16-full-adamw-b8s2048-ckpt", q05, batch=8, seq=2048, ckpt=True))
    a(spec("q15b-bf16-full-adamw-b4s1024", "qwen2.5-1.5b"))
    a(spec("q15b-ampbf16-lora16-b4s1024", "qwen2.5-1.5b", precision="amp-bf16", finetune="lora"))
    a(spec("q7b-bf16-lora16-b2s2048", "qwen2.5-7b", finetune="lora", batch=2, seq=2048))
    a(spec("q7b-bf16-lora16-b1s16384-ckpt", "qwen2.5-7b", finetune="lora", batch=1, seq=16384, ckpt=True))
    a(spec("q3-06b-bf16-full-adamw-b4s1024", "qwen3-0.6b"))
    a(spec("q3-06b-bf16-lora16-b4s2048", "qwen3-0.6b", finetune="lora", seq=2048))
    a(spec("q3-8b-bf16-lora16-b1s2048", "qwen3-8b", finetune="lora", batch=1, seq=2048))
    # Mistral family.
    a(spec("m7b-bf16-lora16-b2s2048", "mistral-7b", finetune="lora", batch=2, seq=2048))
    a(spec("m7b-bf16-lora16-b8s4096-ckpt", "mistral-7b", finetune="lora", batch=8, seq=4096, ckpt=True))
    a(spec("nemo12b-bf16-lora16-b1s8192-ckpt", "mistral-nemo-12b", finetune="lora", batch=1, seq=8192, ckpt=True))
    a(spec("nemo12b-bf16-lora16-b1s2048", "mistral-nemo-12b", finetune="lora", batch=1, seq=2048))
    # Gemma 1 / 2 / 3.
    a(spec("g2b-bf16-full-adamw-b2s1024", "gemma-2b", batch=2))
    a(spec("g2b-bf16-lora16-b4s1024", "gemma-2b", finetune="lora"))
    a(spec("g2-2b-bf16-full-adamw-b2s1024", "gemma-2-2b", batch=2))
    a(spec("g2-2b-bf16-full-adamw-b2s1024-eager", "gemma-2-2b", batch=2, attention="eager"))
    a(spec("g2-2b-bf16-lora16-b4s1024", "gemma-2-2b", finetune="lora"))
    a(spec("g2-2b-bf16-lora16-b2s1024-eager", "gemma-2-2b", finetune="lora", batch=2, attention="eager"))
    a(spec("g2-2b-ampbf16-lora16-b2s1024", "gemma-2-2b", precision="amp-bf16", finetune="lora", batch=2))
    a(spec("g2-2b-bf16-full-adamw-b2s1024-ga2", "gemma-2-2b", batch=2, ga=2))
    a(spec("g2-9b-bf16-lora16-b1s2048", "gemma-2-9b", finetune="lora", batch=1, seq=2048))
    a(spec("g3-1b-bf16-full-adamw-b2s2048", "gemma-3-1b", batch=2, seq=2048, budget_gib=30))
    a(spec("g3-1b-bf16-lora16-b4s2048", "gemma-3-1b", finetune="lora", seq=2048, budget_gib=30))
    a(spec("g3-1b-bf16-full-adamw-b2s1024-eager", "gemma-3-1b", batch=2, attention="eager", budget_gib=25))
    a(spec("g3-4b-bf16-lora16-b2s2048", "gemma-3-4b", finetune="lora", batch=2, seq=2048, budget_gib=35))
    a(spec("g3-4b-bf16-full-adamw-b1s2048", "gemma-3-4b", batch=1, seq=2048, budget_gib=60))
    a(spec("g3-4b-bf16-lora16-b1s8192-ckpt", "gemma-3-4b", finetune="lora", batch=1, seq=8192, ckpt=True,
           budget_gib=30))
    a(spec("g3-12b-bf16-lora16-b1s2048", "gemma-3-12b", finetune="lora", batch=1, seq=2048, budget_gib=45))
    # Phi-3 / Phi-4.
    a(spec("phi3-bf16-full-adamw-b2s1024", "phi-3-mini", batch=2))
    a(spec("phi3-bf16-full-adamw-b2s1024-ga2", "phi-3-mini", batch=2, ga=2))
    a(spec("phi3-bf16-lora16-b2s2048", "phi-3-mini", finetune="lora", batch=2, seq=2048))
    a(spec("phi4m-bf16-lora16-b2s2048", "phi-4-mini", finetune="lora", batch=2, seq=2048))
    a(spec("phi4m-bf16-full-adamw-b1s2048", "phi-4-mini", batch=1, seq=2048))
    # GPT-NeoX (Pythia) and GPT-2.
    a(spec("py410m-bf16-full-adamw-b8s1024", "pythia-410m", batch=8))
    a(spec("py410m-ampbf16-full-adamw-b8s1024", "pythia-410m", precision="amp-bf16", batch=8))
    a(spec("py28b-bf16-full-adamw-b2s1024", "pythia-2.8b", batch=2))
    a(spec("py28b-bf16-lora16-b4s2048", "pythia-2.8b", finetune="lora", seq=2048,
           targets=["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]))
    a(spec("py28b-bf16-lora16-b4s2048-qkv", "pythia-2.8b", finetune="lora", seq=2048, targets=["query_key_value"]))
    gt = ["c_attn", "c_proj", "c_fc"]
    a(spec("gpt2-bf16-full-adamw-b8s1024", "gpt2", batch=8))
    a(spec("gpt2-ampbf16-full-adamw-b8s1024", "gpt2", precision="amp-bf16", batch=8))
    a(spec("gpt2-ampfp16-full-adamw-b8s1024", "gpt2", precision="amp-fp16", batch=8))
    a(spec("gpt2-fp32-full-adamw-b4s1024", "gpt2", precision="fp32"))
    a(spec("gpt2-bf16-full-adamw-b8s1024-eager", "gpt2", batch=8, attention="eager"))
    a(spec("gpt2-bf16-full-adamw-b4s1024-ga4", "gpt2", ga=4))
    a(spec("gpt2-bf16-lora16-b8s1024", "gpt2", finetune="lora", batch=8, targets=gt))
    a(spec("gpt2-ampbf16-lora16-b8s1024", "gpt2", precision="amp-bf16", finetune="lora", batch=8, targets=gt))
    # OLMo 2 / 3, StarCoder2.
    a(spec("olmo2-1b-bf16-full-adamw-b4s1024", "olmo-2-1b", budget_gib=30))
    a(spec("olmo2-1b-bf16-lora16-b4s2048", "olmo-2-1b", finetune="lora", seq=2048, budget_gib=25))
    a(spec("olmo2-7b-bf16-lora16-b2s2048", "olmo-2-7b", finetune="lora", batch=2, seq=2048, budget_gib=40))
    a(spec("olmo3-7b-bf16-lora16-b1s4096", "olmo-3-7b", finetune="lora", batch=1, seq=4096, budget_gib=40))
    a(spec("sc2-3b-bf16-full-adamw-b2s1024", "starcoder2-3b", batch=2, budget_gib=50))
    a(spec("sc2-3b-bf16-lora16-b4s2048", "starcoder2-3b", finetune="lora", seq=2048, budget_gib=30,
           targets=["q_proj", "k_proj", "v_proj", "o_proj", "c_fc", "c_proj"]))
    a(spec("sc2-7b-bf16-lora16-b2s2048", "starcoder2-7b", finetune="lora", batch=2, seq=2048, budget_gib=40,
           targets=["q_proj", "k_proj", "v_proj", "o_proj"]))
    # Mixture of experts.
    a(spec("qmoe-bf16-lora16-b2s1024", "qwen1.5-moe-a2.7b", finetune="lora", batch=2))
    a(spec("qmoe-bf16-full-adamw-b1s512-l6", "qwen1.5-moe-a2.7b", batch=1, seq=512, layers=6))
    a(spec("mix-bf16-lora16-b2s1024-l4", "mixtral-8x7b", finetune="lora", batch=2, layers=4))
    a(spec("mix-bf16-full-adamw-b1s1024-l2", "mixtral-8x7b", batch=1, layers=2))
    a(spec("q3moe-bf16-lora16-b1s2048", "qwen3-30b-a3b", finetune="lora", batch=1, seq=2048, budget_gib=85,
           attribution=False))
    a(spec("q3moe-bf16-full-adamw-b1s1024-l4", "qwen3-30b-a3b", batch=1, layers=4, budget_gib=50))
    a(spec("q3moe-bf16-lora16-b2s1024-l8", "qwen3-30b-a3b", finetune="lora", batch=2, layers=8, budget_gib=25))
    a(spec("dsv2l-bf16-lora16-b1s2048", "deepseek-v2-lite", finetune="lora", batch=1, seq=2048, budget_gib=50,
           attribution=False))
    a(spec("dsv2l-bf16-full-adamw-b1s1024-l4", "deepseek-v2-lite", batch=1, layers=4, budget_gib=40))
    a(spec("dsv2l-bf16-full-adamw-b2s1024-l4-eager", "deepseek-v2-lite", batch=2, layers=4, attention="eager",
           budget_gib=45))
    a(spec("moon-bf16-lora16-b1s2048", "moonlight-16b-a3b", finetune="lora", batch=1, seq=2048, budget_gib=50,
           attribution=False))
    a(spec("moon-bf16-full-adamw-b1s1024-l4", "moonlight-16b-a3b", batch=1, layers=4, budget_gib=45))
    # Added 2026-12-01 (fourth session): LoRA on MLA's q/o only, autocast on the new families.
    a(spec("dsv2l-bf16-lora16qo-b1s2048", "deepseek-v2-lite", finetune="lora", batch=1, seq=2048, budget_gib=50,
           targets=["q_proj", "o_proj"]))
    a(spec("moon-bf16-lora16qo-b1s2048", "moonlight-16b-a3b", finetune="lora", batch=1, seq=2048, budget_gib=50,
           targets=["q_proj", "o_proj"]))
    a(spec("g3-1b-ampbf16-full-adamw-b2s1024", "gemma-3-1b", precision="amp-bf16", batch=2, budget_gib=40))
    a(spec("olmo2-1b-ampbf16-lora16-b4s1024", "olmo-2-1b", precision="amp-bf16", finetune="lora", budget_gib=40))
    a(spec("sc2-3b-ampbf16-lora16-b2s1024", "starcoder2-3b", precision="amp-bf16", finetune="lora", batch=2,
           budget_gib=40))
    # Added 2026-12-01 (fifth session): bitsandbytes built from source on the H200 (QLoRA, 8-bit
    # and paged optimizers as users run them) and activation offload (torch's save_on_cpu).
    a(spec("l1b-bf16-qlora16-b4s1024", l1, finetune="qlora", budget_gib=30))
    a(spec("l1b-bf16-qlora16-b4s1024-ckpt", l1, finetune="qlora", ckpt=True, budget_gib=20))
    a(spec("l1b-ampbf16-qlora16-b4s1024", l1, precision="amp-bf16", finetune="qlora", budget_gib=30))
    a(spec("l8b-bf16-qlora16-b2s2048-ckpt", l8, finetune="qlora", batch=2, seq=2048, ckpt=True, budget_gib=30))
    a(spec("l8b-bf16-qlora16-b1s1024", l8, finetune="qlora", batch=1, budget_gib=30))
    a(spec("q7b-bf16-qlora16-b1s2048-ckpt", "qwen2.5-7b", finetune="qlora", batch=1, seq=2048, ckpt=True,
           budget_gib=30))
    a(spec("m7b-bf16-qlora16-b2s1024", "mistral-7b", finetune="qlora", batch=2, budget_gib=35))
    a(spec("l1b-bf16-full-adamw8bit-b4s1024", l1, optimizer="adamw-8bit", budget_gib=30))
    a(spec("l1b-bf16-full-adamw8bit-b1s512", l1, optimizer="adamw-8bit", batch=1, seq=512, budget_gib=20))
    a(spec("q05b-bf16-full-adamw8bit-b4s1024", q05, optimizer="adamw-8bit", budget_gib=25))
    a(spec("l1b-bf16-full-lion-b4s1024", l1, optimizer="lion", budget_gib=30))
    a(spec("l1b-bf16-full-pagedadamw8bit-b4s1024", l1, optimizer="paged-adamw-8bit", budget_gib=30))
    a(spec("l1b-bf16-full-pagedadamw8bit-b1s512", l1, optimizer="paged-adamw-8bit", batch=1, seq=512, budget_gib=20))
    a(spec("l8b-bf16-full-pagedadamw8bit-b1s1024", l8, optimizer="paged-adamw-8bit", batch=1, budget_gib=60))
    a(spec("l1b-bf16-full-adamw-b4s1024-offload", l1, offload=True, budget_gib=25))
    a(spec("l1b-bf16-full-adamw-b4s1024-ckpt-offload", l1, ckpt=True, offload=True, budget_gib=25))
    a(spec("l1b-ampbf16-full-adamw-b4s1024-offload", l1, precision="amp-bf16", offload=True, budget_gib=30))
    a(spec("l1b-bf16-lora16-b4s2048-offload", l1, finetune="lora", seq=2048, offload=True, budget_gib=25))
    a(spec("l8b-bf16-lora16-b4s2048-offload", l8, finetune="lora", seq=2048, offload=True, budget_gib=45))
    a(spec("q05b-bf16-full-adamw-b8s1024-offload", q05, batch=8, offload=True, budget_gib=25))
    a(spec("gpt2-bf16-full-adamw-b8s1024-offload", "gpt2", batch=8, offload=True, budget_gib=15))
    # QLoRA where the per-op ledger still estimates it (MoE, GPT-2's Conv1D): measured for the next step.
    a(spec("mix-bf16-qlora16-b2s1024-l4", "mixtral-8x7b", finetune="qlora", batch=2, layers=4, budget_gib=60))
    a(spec("q3moe-bf16-qlora16qo-b2s1024-l8", "qwen3-30b-a3b", finetune="qlora", batch=2, layers=8, budget_gib=40,
           targets=["q_proj", "o_proj"]))
    a(spec("gpt2-bf16-qlora16-b8s1024", "gpt2", finetune="qlora", batch=8, targets=gt, budget_gib=15))
    # Every k-th layer checkpointed (issue 14), and QLoRA on more families (fused projections, MLA, Gemma).
    a(spec("l1b-bf16-full-adamw-b4s1024-ckpt-every2", l1, ckpt=True, every=2, budget_gib=25))
    a(spec("l8b-bf16-lora16-b4s2048-ckpt-every4", l8, finetune="lora", seq=2048, ckpt=True, every=4, budget_gib=50))
    a(spec("q05b-bf16-full-adamw-b8s2048-ckpt-every3", q05, batch=8, seq=2048, ckpt=True, every=3, budget_gib=30))
    a(spec("g2-2b-bf16-qlora16-b2s1024", "gemma-2-2b", finetune="qlora", batch=2, budget_gib=30))
    a(spec("phi3-bf16-qlora16-b2s2048", "phi-3-mini", finetune="qlora", batch=2, seq=2048, budget_gib=40))
    a(spec("dsv2l-bf16-qlora16qo-b1s2048", "deepseek-v2-lite", finetune="qlora", batch=1, seq=2048, budget_gib=60,
           targets=["q_proj", "o_proj"]))
    a(spec("olmo2-1b-bf16-qlora16-b4s1024", "olmo-2-1b", finetune="qlora", budget_gib=30))
    a(spec("l8b-ampbf16-qlora16-b2s1024-ckpt", l8, precision="amp-bf16", finetune="qlora", batch=2, ckpt=True,
           budget_gib=30))
    # 2026-12-01 (sixth session), held out: other shapes for what that session changed (the
    # QLoRA load, save_on_cpu's contiguous copies), measured after the change, never fitted to.
    a(spec("m7b-bf16-lora16-b2s2048-offload", "mistral-7b", finetune="lora", batch=2, seq=2048, offload=True,
           budget_gib=40))
    a(spec("q3b-bf16-lora16-b4s2048-offload", "qwen2.5-3b", finetune="lora", seq=2048, offload=True, budget_gib=35))
    a(spec("l3b-ampbf16-lora16-b4s1024-offload", "llama-3.2-3b", precision="amp-bf16", finetune="lora",
           offload=True, budget_gib=35))
    a(spec("olmo2-1b-bf16-full-adamw-b4s1024-offload", "olmo-2-1b", offload=True, budget_gib=30))
    a(spec("q3b-bf16-qlora16-b2s2048", "qwen2.5-3b", finetune="qlora", batch=2, seq=2048, budget_gib=72))
    a(spec("nemo-bf16-qlora16-b1s2048-ckpt", "mistral-nemo-12b", finetune="qlora", batch=1, seq=2048, ckpt=True,
           budget_gib=40))
    a(spec("phi4m-bf16-qlora16-b2s1024", "phi-4-mini", finetune="qlora", batch=2, budget_gib=35))
    # Issue 27 (2026-12-04, seventh session): the cases a new user found off, each a mechanism.
    sc2_drop = {"attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1}  # the real config.json
    sc2_t = ["q_proj", "k_proj", "v_proj", "o_proj", "c_fc", "c_proj"]
    sc2_as = ("starcoder2-7b-dropout", "StarCoder2 7B (config.json dropout 0.1)")
    a(spec("sc2-7b-drop-bf16-lora16am-b2s4096-ckpt-ga2", "starcoder2-7b", finetune="lora", batch=2, seq=4096,
           ga=2, ckpt=True, targets=sc2_t, hf=sc2_drop, as_model=sc2_as, budget_gib=40))
    a(spec("sc2-7b-drop-bf16-lora16am-b2s4096-ckpt", "starcoder2-7b", finetune="lora", batch=2, seq=4096,
           ckpt=True, targets=sc2_t, hf=sc2_drop, as_model=sc2_as, budget_gib=40))
    a(spec("sc2-7b-drop-bf16-lora16am-b1s2048", "starcoder2-7b", finetune="lora", batch=1, seq=2048,
           targets=sc2_t, hf=sc2_drop, as_model=sc2_as, budget_gib=40))
    gpt2l = {"n_embd": 1280, "n_layer": 36, "n_head": 20}
    a(spec("gpt2l-ampbf16-full-adamw-b4s1024-ckpt", "gpt2", precision="amp-bf16", ckpt=True, hf=gpt2l,
           as_model=("gpt2-large", "GPT-2 Large (774M)"), budget_gib=30))
    a(spec("l2-7b-ampbf16-lora16qkvo-b2s1024", "llama-2-7b", precision="amp-bf16", finetune="lora", batch=2,
           targets=["q_proj", "k_proj", "v_proj", "o_proj"], budget_gib=50))
    a(spec("l2-7b-bf16-full-adamw-b4s2048-ckpt", "llama-2-7b", seq=2048, ckpt=True, budget_gib=75))
    a(spec("l2-7b-bf16-full-adamw-b1s2048-eager", "llama-2-7b", batch=1, seq=2048, attention="eager",
           budget_gib=75))
    a(spec("q7b-bf16-full-adamw-b1s2048-eager", "qwen2.5-7b", batch=1, seq=2048, attention="eager",
           budget_gib=90))
    a(spec("qmoe-bf16-full-adamw-b4s1024-l8", "qwen1.5-moe-a2.7b", layers=8, budget_gib=50))
    a(spec("g2-9b-bf16-lora16-b2s2048-eager", "gemma-2-9b", finetune="lora", batch=2, seq=2048,
           attention="eager", budget_gib=60))
    a(spec("dsv2l-bf16-lora16mla-b1s2048", "deepseek-v2-lite", finetune="lora", batch=1, seq=2048, budget_gib=50,
           targets=["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]))
    a(spec("dsv2l-bf16-lora16all-b1s1024-l4", "deepseek-v2-lite", finetune="lora", batch=1, layers=4,
           budget_gib=30, targets=["all-linear"]))
    # Held out for Note [Checkpoint stop] and Note [Input require grads] (2026-12-04, after the
    # change): other families and shapes with dropout under checkpointing, LoRA with checkpointing.
    a(spec("sc2-3b-drop-bf16-lora16am-b2s2048-ckpt-ga2", "starcoder2-3b", finetune="lora", batch=2, seq=2048, ga=2,
           ckpt=True, targets=sc2_t, hf=sc2_drop, as_model=("starcoder2-3b-dropout", "StarCoder2 3B (dropout 0.1)"),
           budget_gib=30))
    a(spec("gpt2-ampbf16-full-adamw-b8s1024-ckpt", "gpt2", precision="amp-bf16", batch=8, ckpt=True, budget_gib=15))
    a(spec("l1b-bf16-lora16drop-b4s2048-ckpt", l1, finetune="lora", seq=2048, ckpt=True, dropout=0.05, budget_gib=25))
    a(spec("q05b-bf16-lora16-b8s1024-ckpt-every2", q05, finetune="lora", batch=8, ckpt=True, every=2, budget_gib=20))
    # Held out for the eighth-session (2026-12-04, ninth session) stream fixes, measured after them:
    # flash's backward workspace without GQA (MHA: OLMo-2, Pythia, Phi-3), the eager softmax's
    # fp32 conversion and its backward temporary (bf16, fp16, amp-fp16; MHA and GQA), and the MoE
    # block's flat Linear inputs (Qwen2-MoE's shared-expert gate, Mixtral's router).
    a(spec("olmo2-1b-bf16-full-adamw-b8s2048-ckpt", "olmo-2-1b", batch=8, seq=2048, ckpt=True))
    a(spec("py410m-bf16-full-adamw-b8s2048-ckpt", "pythia-410m", batch=8, seq=2048, ckpt=True))
    a(spec("phi3-bf16-full-adamw-b2s2048-ckpt", "phi-3-mini", batch=2, seq=2048, ckpt=True))
    a(spec("olmo2-1b-bf16-full-adamw-b2s2048-eager", "olmo-2-1b", batch=2, seq=2048, attention="eager"))
    a(spec("q3-06b-bf16-lora16-b2s2048-eager", "qwen3-0.6b", finetune="lora", batch=2, seq=2048, attention="eager"))
    a(spec("m7b-bf16-lora16-b1s2048-eager", "mistral-7b", finetune="lora", batch=1, seq=2048, attention="eager"))
    a(spec("l1b-ampfp16-lora16-b2s1024-eager", l1, precision="amp-fp16", finetune="lora", batch=2, attention="eager"))
    a(spec("l1b-fp16-full-sgd-b2s1024-eager", l1, precision="fp16", optimizer="sgd", batch=2, attention="eager"))
    a(spec("qmoe-bf16-lora16-b2s2048", "qwen1.5-moe-a2.7b", finetune="lora", batch=2, seq=2048))
    a(spec("mix-bf16-full-adamw-b2s1024-l2", "mixtral-8x7b", batch=2, layers=2))
    # 2026-12-04 (tenth session): the GPT-OSS row (Notes [Attention sinks], [GPT-OSS experts],
    # [Returned attention weights]), held out: the real checkpoints' sizes, cut in depth. Eager
    # attention (Transformers has no SDPA path for the sinks); LoRA on what all-linear finds.
    qkvo = ["q_proj", "k_proj", "v_proj", "o_proj"]
    a(spec("oss20-bf16-lora16-b2s2048-l4-eager", "gpt-oss-20b", finetune="lora", batch=2, seq=2048, layers=4,
           attention="eager", targets=["all-linear"]))
    a(spec("oss20-bf16-full-adamw-b2s1024-l4-eager", "gpt-oss-20b", batch=2, layers=4, attention="eager"))
    a(spec("oss20-bf16-full-adamw-b1s4096-l2-eager-ckpt", "gpt-oss-20b", batch=1, seq=4096, layers=2,
           attention="eager", ckpt=True))
    a(spec("oss20-bf16-lora16-b4s2048-l4-eager-ckpt", "gpt-oss-20b", finetune="lora", batch=4, seq=2048, layers=4,
           attention="eager", ckpt=True, targets=qkvo))
    a(spec("oss120-bf16-lora16-b1s2048-l2-eager", "gpt-oss-120b", finetune="lora", batch=1, seq=2048, layers=2,
           attention="eager", targets=qkvo))
    a(spec("oss20-bf16-qlora16-b2s1024-l4-eager", "gpt-oss-20b", finetune="qlora", batch=2, layers=4,
           attention="eager", targets=qkvo))
    # 2026-12-04 (tenth session): the Falcon row (Note [SDPA math path in fp32]), held out:
    # Falcon-7B's widths (71 heads, one kv head), cut in depth.
    a(spec("falcon7b-bf16-lora16-b2s1024-l4", "falcon-7b", finetune="lora", batch=2, layers=4, targets=["all-linear"]))
    a(spec("falcon7b-bf16-full-adamw-b1s2048-l2", "falcon-7b", batch=1, seq=2048, layers=2))
    a(spec("falcon7b-bf16-lora16-b4s1024-l4-ckpt", "falcon-7b", finetune="lora", layers=4, ckpt=True,
           targets=["query_key_value", "dense"]))
    a(spec("falcon7b-bf16-qlora16-b2s2048-l4-ckpt", "falcon-7b", finetune="qlora", batch=2, seq=2048, layers=4,
           ckpt=True, targets=["all-linear"]))
    # ... and both rows at the real checkpoints' full depth.
    a(spec("falcon7b-bf16-lora16-b1s2048", "falcon-7b", finetune="lora", batch=1, seq=2048, targets=["all-linear"]))
    a(spec("falcon7b-bf16-qlora16-b1s1024-ckpt", "falcon-7b", finetune="qlora", batch=1, ckpt=True,
           targets=["all-linear"]))
    a(spec("oss20-bf16-lora16-b1s2048-eager-ckpt", "gpt-oss-20b", finetune="lora", batch=1, seq=2048,
           attention="eager", ckpt=True, targets=["all-linear"]))
    # 2026-12-04 (tenth session): QLoRA under autocast, built in bf16 with 16-bit first adapter
    # copies and no input cast in PEFT's bnb layer (Note [QLoRA load]), held out.
    a(spec("q7b-ampbf16-qlora16-b2s2048-ckpt", "qwen2.5-7b", precision="amp-bf16", finetune="qlora", batch=2,
           seq=2048, ckpt=True))
    a(spec("m7b-ampfp16-qlora16-b1s2048", "mistral-7b", precision="amp-fp16", finetune="qlora", batch=1, seq=2048))
    a(spec("g2-2b-ampbf16-qlora16-b2s1024", "gemma-2-2b", precision="amp-bf16", finetune="qlora", batch=2))
    a(spec("phi3-ampbf16-qlora16-b2s1024", "phi-3-mini", precision="amp-bf16", finetune="qlora", batch=2,
           targets=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]))
    # 2026-12-04 (eleventh session): the Qwen3.5 rows (Note [Gated DeltaNet]: the gated DeltaNet
    # through Transformers' torch fallbacks, the gated attention), held out: the real checkpoints'
    # widths, cut in depth. Qwen3.5-9B: Axolotl's qwen3.5 recipes' targets, all-linear (the
    # DeltaNet's Linears too), a sequence that is not a multiple of the 64-token chunk, QLoRA;
    # Qwen3.5-35B-A3B: the shared experts named, full, checkpointed.
    axo = ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "up_proj"]
    a(spec("q35-9b-bf16-lora16axo-b2s2048-l8", "qwen3.5-9b", finetune="lora", batch=2, seq=2048, layers=8, targets=axo))
    a(spec("q35-9b-bf16-full-adamw-b1s2048-l4", "qwen3.5-9b", batch=1, seq=2048, layers=4))
    a(spec("q35-9b-bf16-lora16all-b1s4096-l8-ckpt", "qwen3.5-9b", finetune="lora", batch=1, seq=4096, layers=8,
           ckpt=True, targets=["all-linear"]))
    a(spec("q35-9b-bf16-lora16-b2s1000-l4", "qwen3.5-9b", finetune="lora", batch=2, seq=1000, layers=4))
    a(spec("q35-9b-bf16-qlora16axo-b1s2048-l8-ckpt", "qwen3.5-9b", finetune="qlora", batch=1, seq=2048, layers=8,
           ckpt=True, targets=axo))
    # Qwen3.5-27B as Axolotl's 27b-qlora recipe runs it (QLoRA on its targets, checkpointed), cut in depth.
    a(spec("q35-27b-bf16-qlora16axo-b1s2048-l8-ckpt", "qwen3.5-27b", finetune="qlora", batch=1, seq=2048, layers=8,
           ckpt=True, targets=axo))
    a(spec("q35moe-bf16-lora16-b2s2048-l4", "qwen3.5-35b-a3b", finetune="lora", batch=2, seq=2048, layers=4))
    a(spec("q35moe-bf16-full-adamw-b1s1024-l2", "qwen3.5-35b-a3b", batch=1, layers=2))
    a(spec("q35moe-bf16-lora16all-b1s4096-l4-ckpt", "qwen3.5-35b-a3b", finetune="lora", batch=1, seq=4096, layers=4,
           ckpt=True, targets=["all-linear"]))
    # Gemma 4 (the gemma4_text row, Note [Gemma 4]) at the real widths, cut in depth: 31B's language
    # model (global layers of 512-wide heads, 4 kv heads, keys as values; final softcapping; a
    # 1024-token window), and E2B's with its key/value sharing off (per-layer inputs beside the
    # global layers; the sharing itself is traced).
    g31, e2b, noshare = "gemma-4-31b-text", "gemma-4-e2b-text", {"num_kv_shared_layers": 0}
    a(spec("g4-31b-bf16-lora16-b2s2048-l6", g31, finetune="lora", batch=2, seq=2048, layers=6))
    a(spec("g4-31b-bf16-full-adamw-b1s2048-l6", g31, batch=1, seq=2048, layers=6))
    a(spec("g4-31b-bf16-lora16all-b1s4096-l6-ckpt", g31, finetune="lora", batch=1, seq=4096, layers=6, ckpt=True,
           targets=["all-linear"]))
    a(spec("g4-31b-bf16-qlora16-b1s2048-l6-ckpt", g31, finetune="qlora", batch=1, seq=2048, layers=6, ckpt=True))
    a(spec("g4-31b-ampbf16-lora16-b2s1024-l6", g31, precision="amp-bf16", finetune="lora", batch=2, layers=6))
    a(spec("g4-e2b-bf16-lora16all-b2s2048-l10", e2b, finetune="lora", batch=2, seq=2048, layers=10,
           targets=["all-linear"], hf=noshare))
    a(spec("g4-e2b-bf16-full-adamw-b2s1024-l5", e2b, batch=2, layers=5, hf=noshare))
    a(spec("g4-e2b-bf16-lora16-b4s1024-l10-ckpt", e2b, finetune="lora", layers=10, ckpt=True, hf=noshare))
    # ... and with its key/value sharing: the last 4 of 10 layers read the keys and values the
    # last earlier sliding and global layers stored, their MLPs twice as wide.
    share = {"num_kv_shared_layers": 4}
    a(spec("g4-e2bs-bf16-lora16all-b2s2048-l10", e2b, finetune="lora", batch=2, seq=2048, layers=10,
           targets=["all-linear"], hf=share))
    a(spec("g4-e2bs-bf16-full-adamw-b2s1024-l10", e2b, batch=2, layers=10, hf=share))
    a(spec("g4-e2bs-bf16-lora16-b4s2048-l10-ckpt", e2b, finetune="lora", seq=2048, layers=10, ckpt=True, hf=share))
    # The allocator's expandable segments, on a spread of the above.
    for n in ["l1b-bf16-full-adamw-b4s1024", "l1b-bf16-full-adamw-b4s1024-ckpt", "l1b-ampbf16-full-adamw-b4s1024",
              "l1b-bf16-lora16-b4s2048", "l1b-bf16-lora16-b4s2048-ckpt", "l1b-bf16-full-adamw-b4s1024-ga2",
              "l1b-bf16-full-adafactor-b4s1024", "l8b-bf16-lora16-b4s2048-ckpt",
              "q05b-bf16-full-adamw-b8s1024", "q05b-bf16-full-adamw-b8s2048-ckpt",
              "m7b-bf16-lora16-b8s4096-ckpt", "g2-2b-bf16-full-adamw-b2s1024",
              "g2-2b-bf16-lora16-b4s1024", "phi3-bf16-full-adamw-b2s1024", "py28b-bf16-full-adamw-b2s1024",
              "gpt2-bf16-full-adamw-b8s1024", "qmoe-bf16-lora16-b2s1024", "g3-1b-bf16-full-adamw-b2s2048",
              "olmo2-1b-bf16-full-adamw-b4s1024", "l1b-bf16-full-sgd-b4s1024", "q15b-bf16-full-adamw-b4s1024",
              "l1b-ampbf16-lora16-b4s1024",
              # 2026-12-01: more families and options with expandable segments (issue 12's >= 20)
              "q3-06b-bf16-full-adamw-b4s1024", "l8b-bf16-lora16-b4s2048", "q7b-bf16-lora16-b2s2048",
              "py410m-bf16-full-adamw-b8s1024", "gpt2-ampbf16-lora16-b8s1024", "l1b-fp32-full-adamw-b2s512",
              "mix-bf16-lora16-b2s1024-l4", "l3b-bf16-full-adamw-b2s2048",
              # 2026-12-01 (fifth session): QLoRA and activation offload with expandable segments
              "l8b-bf16-qlora16-b2s2048-ckpt", "l1b-bf16-full-adamw-b4s1024-offload"]:
        base = next(s for s in S if s["name"] == n)
        a(dict(base, name=n + "-expandable", alloc_conf="expandable_segments:True", timeline=False,
               attribution=False))
    return S


def request_of(s):
    r = _request_of(s)
    if s["offload"]:
        r["config"]["activation_offload"] = True
    if s["every"]:
        r["config"]["checkpoint_every"] = s["every"]
    return r


def _request_of(s):
    p = preset(s["model"])
    cfg = dict(p["config"])
    meta = dict(p["headroom"])
    if s.get("hf"):
        cfg.update(s["hf"])
    if s.get("as_model"):
        meta["id"], meta["name"] = s["as_model"]
        meta.pop("published_params", None)
    if s["layers"]:
        cfg["num_hidden_layers"] = s["layers"]
        if "layer_types" in cfg:
            cfg["layer_types"] = cfg["layer_types"][: s["layers"]]
        meta["id"] = f"{meta['id']}-l{s['layers']}"
        meta["name"] = f"{meta['name']} ({s['layers']} layers)"
        meta.pop("published_params", None)
    return {"schema_version": 1, "kind": "probe_request", "steps": s["steps"], "device": "cuda",
            "engine": "transformers", "model": {"headroom": meta, "config": cfg},
            "config": {"precision": s["precision"], "optimizer": s["optimizer"], "optimizer_impl": s["impl"],
                       "finetune": s["finetune"], "micro_batch": s["batch"], "seq_len": s["seq"],
                       "grad_accum": s["ga"], "grad_checkpointing": s["ckpt"], "attention": s["attention"],
                       "world_size": 1, "zero_stage": 0,
                       "lora": {"rank": s["rank"], "alpha": 2 * s["rank"], "dropout": s["dropout"],
                                "targets": s["targets"], "double_quant": True}}}


def estimate_cmd(cli, model_path, c):
    """headroom-cli estimate --json of a probe request's training config."""
    cmd = [cli, "estimate", "--json", "--model", model_path, "--precision", c["precision"], "--optimizer",
           c["optimizer"], "--optimizer-impl", c["optimizer_impl"], "--finetune", c["finetune"], "--lora-rank",
           str(c["lora"]["rank"]), "--lora-targets", ",".join(c["lora"]["targets"]), "--batch", str(c["micro_batch"]),
           "--seq", str(c["seq_len"]), "--grad-accum", str(c["grad_accum"]), "--attention", c["attention"]]
    if c["grad_checkpointing"]:
        cmd.append("--grad-checkpointing")
    return cmd


def plan(out, cli):
    import tempfile
    jobs = []
    for s in specs():
        req = request_of(s)
        budget = None
        if s["budget_gib"]:
            budget = int(s["budget_gib"] * GIB)
        else:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(req["model"], f)
                mpath = f.name
            r = subprocess.run(estimate_cmd(cli, mpath, req["config"]), capture_output=True, text=True)
            os.unlink(mpath)
            if r.returncode != 0:
                raise SystemExit(f"{s['name']}: {r.stderr.strip()}")
            est = json.loads(r.stdout)
            budget = int(est["peak"]["device_total_bytes"] * 1.15 + 1.0 * GIB)
        jobs.append({"name": s["name"], "request": req, "budget_bytes": budget, "alloc_conf": s["alloc_conf"],
                     "timeline": s["timeline"], "attribution": s["attribution"]})
    by = {j["name"]: j for j in jobs}
    # The engine against a plain measuring script (lab/plain_step.py), five configurations.
    for n in ["l1b-bf16-full-adamw-b4s1024", "l1b-bf16-lora16-b4s2048", "l1b-ampbf16-full-adamw-b4s1024",
              "q05b-fp32-full-adamw-b4s512", "l8b-bf16-lora16qv-b2s2048"]:
        jobs.append({"name": "plain-" + n, "kind": "plain", "request": by[n]["request"],
                     "budget_bytes": by[n]["budget_bytes"]})
    # Several ranks sharing the one GPU over Gloo, through headroom-probe --engine transformers.
    for n, zero, extra in [("l1b-ampbf16-full-adamw-b2s1024", 0, {}), ("l1b-ampbf16-full-adamw-b2s1024", 1, {}),
                           ("l1b-ampbf16-full-adamw-b2s1024", 2, {}), ("l1b-ampbf16-full-adamw-b2s1024", 3, {}),
                           ("l1b-bf16-full-adamw-b2s1024", 3, {}), ("l1b-bf16-lora16-b2s1024", 3, {"finetune": "lora"}),
                           ("l1b-bf16-full-adamw-b2s1024-ga2", 0, {"grad_accum": 2}),
                           # sixth session, held out (DDP's bucket rebuild, ZeRO-1's partition order)
                           ("l1b-bf16-lora16-b2s1024", 0, {"finetune": "lora"}),
                           ("l1b-bf16-full-adamw-b2s1024", 1, {})]:
        base = by["l1b-ampbf16-full-adamw-b4s1024" if "amp" in n else "l1b-bf16-full-adamw-b4s1024"]
        req = json.loads(json.dumps(base["request"]))
        req["config"].update(micro_batch=2, zero_stage=zero, world_size=2, **extra)
        jobs.append({"name": f"share2-{n}-z{zero}", "kind": "ranks", "request": req,
                     "budget_bytes": int(2 * base["budget_bytes"] * 0.75)})
    json.dump({"schema_version": 1, "kind": "corpus_plan", "jobs": jobs}, open(out, "w"), indent=1)
    print(f"{len(jobs)} jobs, budgets {sum(j['budget_bytes'] for j in jobs) / GIB:.0f} GiB in all -> {out}")


def predict(plan_path, cli, names):
    import tempfile
    jobs = {j["name"]: j for j in json.load(open(plan_path))["jobs"]}
    for n in names:
        if n not in jobs:
            raise SystemExit(f"predict: {n}: not in {plan_path}")
        req = jobs[n]["request"]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(req["model"], f)
            mpath = f.name
        r = subprocess.run(estimate_cmd(cli, mpath, req["config"]) + ["--gpu", "h200"], capture_output=True, text=True)
        os.unlink(mpath)
        if r.returncode != 0:
            raise SystemExit(f"{n}: {r.stderr.strip()}")
        e = json.loads(r.stdout)
        print(json.dumps({"name": n, "peak_allocated_bytes": e["peak"]["allocated_bytes"],
                          "peak_reserved_bytes": e["peak"]["reserved_bytes"],
                          "phases": {p["phase"]: p["peak_allocated_bytes"] for p in e["phases"]}}))


def run(plan_path, out_dir, jobs_max, deadline, only, capacity_gib, engine, probe, skip):
    P = json.load(open(plan_path))
    done_before = set()
    if skip and os.path.exists(skip):
        for line in open(skip):
            r = json.loads(line)
            if r.get("exit") in (0, 3) and not r.get("retry"):
                done_before.add(r["name"])
    jobs = [j for j in P["jobs"] if (not only or j["name"] in only) and j["name"] not in done_before]
    # The slow multi-process and plain-script jobs start first, next to the quick ones.
    jobs.sort(key=lambda j: 0 if j.get("kind") in ("ranks", "plain") else 1)
    os.makedirs(os.path.join(out_dir, "timelines"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "req"), exist_ok=True)
    capacity = int(capacity_gib * GIB)
    t0 = time.time()
    pending = list(jobs)
    solo = []  # OOM next to others: once more, alone
    running = {}
    results = open(os.path.join(out_dir, "results.jsonl"), "a")
    done = 0

    def launch(j, alone=False):
        rp = os.path.join(out_dir, "req", j["name"] + ".json")
        json.dump(j["request"], open(rp, "w"))
        op = os.path.join(out_dir, "req", j["name"] + ".out.json")
        kind = j.get("kind", "engine")
        if kind == "plain":
            cmd = [sys.executable, os.path.join(ROOT, "lab", "plain_step.py"), "--request", rp, "--out", op]
        elif kind == "ranks":
            cmd = [probe, "--engine", "transformers", "--request", rp, "--out", op, "--share-gpu", "--python",
                   sys.executable]
        else:
            cmd = [sys.executable, engine, "--request", rp, "--out", op]
        if j.get("timeline"):
            cmd += ["--timeline", os.path.join(out_dir, "timelines", j["name"] + ".json")]
        if j.get("alloc_conf"):
            cmd += ["--alloc-conf", j["alloc_conf"]]
        if kind == "engine" and not j.get("attribution", True):
            cmd.append("--no-attribution")
        log = open(os.path.join(out_dir, "req", j["name"] + ".log"), "w")
        # Two threads each: a dozen processes share 16 cores without oversubscribing them.
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
        running[p.pid] = (p, j, time.time(), op, alone, log)

    blocked_since = None
    while pending or solo or running:
        used = sum(r[1]["budget_bytes"] for r in running.values())
        late = time.time() - t0 > deadline
        if not late:
            queue = pending if pending else (solo if not running else [])
            for i, j in enumerate(list(queue)):
                if len(running) >= jobs_max:
                    break
                alone = queue is solo
                if alone and running:
                    break
                if used + j["budget_bytes"] <= capacity or not running:
                    queue.remove(j)
                    launch(j, alone)
                    used += j["budget_bytes"]
                    if i == 0:
                        blocked_since = None
                    if alone:
                        break
                elif i == 0:
                    # The head waits for room; after 15 s nothing else may pass it.
                    blocked_since = blocked_since or time.time()
                    if time.time() - blocked_since > 15:
                        break
        elif not running:
            break
        time.sleep(0.2)
        for pid, (p, j, start, op, alone, log) in list(running.items()):
            rc = p.poll()
            if rc is None:
                if time.time() - start > 400:
                    p.kill()
                continue
            del running[pid]
            log.close()
            rec = {"name": j["name"], "exit": rc, "seconds": round(time.time() - start, 2), "alone": alone,
                   "neighbours": len(running)}
            if os.path.exists(op):
                rec["result"] = json.load(open(op))
            else:
                rec["log_tail"] = open(os.path.join(out_dir, "req", j["name"] + ".log")).read()[-3000:]
            if rc == 3 and not alone and j not in solo:
                solo.append(j)
                rec["retry"] = "alone"
            results.write(json.dumps(rec) + "\n")
            results.flush()
            done += 1
            peak = rec.get("result", {}).get("peak", {}).get("allocated_bytes", 0) / GIB
            print(f"{time.time() - t0:6.1f}s [{done}/{len(jobs)}] {j['name']}: exit {rc} peak {peak:.2f} GiB "
                  f"({rec['seconds']}s)", flush=True)
    left = [j["name"] for j in pending + solo]
    if left:
        print(f"not run before the deadline: {', '.join(left)}", flush=True)
    results.close()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p1 = sub.add_parser("plan")
    p1.add_argument("--out", default=os.path.join(ROOT, "lab", "corpus-plan.json"))
    p1.add_argument("--cli", default=os.path.join(ROOT, "build", "dev", "app", "headroom-cli"))
    p2 = sub.add_parser("run")
    p2.add_argument("--plan", default=os.path.join(ROOT, "lab", "corpus-plan.json"))
    p2.add_argument("--out", required=True)
    p2.add_argument("--jobs", type=int, default=12)
    p2.add_argument("--deadline-s", type=float, default=480)
    p2.add_argument("--capacity-gib", type=float, default=128)
    p2.add_argument("--only", default="")
    p2.add_argument("--engine", default=os.path.join(ROOT, "probes", "headroom_engine.py"))
    p2.add_argument("--probe", default=os.path.join(ROOT, "build-gpu", "probes", "headroom-probe"))
    p2.add_argument("--skip-done", default="", help="results.jsonl of an earlier run: skip what it finished")
    sub.add_parser("list")
    p3 = sub.add_parser("predict", help="the estimates of plan jobs, one JSON line each (held out: commit them first)")
    p3.add_argument("names")
    p3.add_argument("--plan", default=os.path.join(ROOT, "lab", "corpus-plan.json"))
    p3.add_argument("--cli", default=os.path.join(ROOT, "build", "dev", "app", "headroom-cli"))
    a = ap.parse_args()
    if a.cmd == "plan":
        plan(a.out, a.cli)
    elif a.cmd == "predict":
        predict(a.plan, a.cli, a.names.split(","))
    elif a.cmd == "run":
        run(a.plan, a.out, a.jobs, a.deadline_s, set(x for x in a.only.split(",") if x), a.capacity_gib, a.engine,
            a.probe, a.skip_done)
    else:
        for s in specs():
            print(s["name"])


if __name__ == "__main__":
    main()
