#!/usr/bin/env python3
"""Measure real Hugging Face training steps, phase by phase, as Headroom's ground truth.

Each configuration runs in its own process: the model is built from a preset in
resources/models/ with random weights on the GPU (nothing is downloaded), one warm-up
step runs (optimizer state appears at the first step()), then measured steps, each
phase with its own peak reset.

    python3 bench/hf_reference.py --out results.json [--only NAME,...] [--deadline-s 540]
    python3 bench/hf_reference.py --list

The training loop mirrors HF Trainer.training_step: loss = model(**batch).loss (the
output object, and so the bf16 logits, are dropped before backward), loss.backward(),
optimizer.step(), optimizer.zero_grad(set_to_none=True). use_cache is off, as in training.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def cfg(name, model, precision="bf16", optimizer="adamw", impl="foreach", finetune="full", batch=4, seq=1024,
        ckpt=False, attention="sdpa", lora_rank=16, lora_targets=None, lora_dropout=0.0):
    return dict(name=name, model=model, precision=precision, optimizer=optimizer, optimizer_impl=impl,
                finetune=finetune, batch=batch, seq=seq, grad_checkpointing=ckpt, attention=attention,
                lora_rank=lora_rank, lora_alpha=2 * lora_rank,
                lora_targets=lora_targets or ALL_LINEAR, lora_dropout=lora_dropout)


# Ordered by importance: a run that hits its deadline keeps the first ones.
CONFIGS = [
    cfg("l1b-bf16-full-adamw-b4s1024", "llama-3.2-1b"),
    cfg("l8b-bf16-lora16-b4s2048", "llama-3.1-8b", finetune="lora", batch=4, seq=2048),
    cfg("l1b-bf16-full-adamw-b4s1024-ckpt", "llama-3.2-1b", ckpt=True),
    cfg("l1b-ampbf16-full-adamw-b4s1024", "llama-3.2-1b", precision="amp-bf16"),
    cfg("l1b-fp32-full-adamw-b2s512", "llama-3.2-1b", precision="fp32", batch=2, seq=512),
    cfg("l1b-bf16-full-sgd-b4s1024", "llama-3.2-1b", optimizer="sgd"),
    cfg("l1b-bf16-full-sgdm-b4s1024", "llama-3.2-1b", optimizer="sgd-momentum"),
    cfg("l1b-bf16-full-adafactor-b4s1024", "llama-3.2-1b", optimizer="adafactor"),
    cfg("l1b-bf16-full-adamw-b2s1024-eager", "llama-3.2-1b", batch=2, attention="eager"),
    cfg("l1b-bf16-lora16-b4s2048", "llama-3.2-1b", finetune="lora", seq=2048),
    cfg("l1b-bf16-lora16-b4s2048-ckpt", "llama-3.2-1b", finetune="lora", seq=2048, ckpt=True),
    cfg("l1b-ampbf16-lora16-b4s1024", "llama-3.2-1b", precision="amp-bf16", finetune="lora"),
    cfg("l1b-bf16-full-adamw-fused-b4s1024", "llama-3.2-1b", impl="fused"),
    cfg("l1b-bf16-full-adamw-forloop-b4s1024", "llama-3.2-1b", impl="for-loop"),
    cfg("l1b-bf16-full-adamw-b1s4096", "llama-3.2-1b", batch=1, seq=4096),
    cfg("l1b-bf16-full-adamw-b8s512", "llama-3.2-1b", batch=8, seq=512),
    cfg("l1b-bf16-full-adamw-b4s512", "llama-3.2-1b", batch=4, seq=512),
    cfg("l1b-bf16-full-adamw-b4s2048", "llama-3.2-1b", batch=4, seq=2048),
    cfg("l1b-bf16-full-adamw-b1s1024", "llama-3.2-1b", batch=1, seq=1024),
    cfg("l1b-bf16-full-adamw-b8s1024", "llama-3.2-1b", batch=8, seq=1024),
    cfg("l1b-bf16-lora16-b4s1024-dropout", "llama-3.2-1b", finetune="lora", lora_dropout=0.05),
    cfg("l8b-bf16-lora16-b4s4096-ckpt", "llama-3.1-8b", finetune="lora", batch=4, seq=4096, ckpt=True),
    cfg("l8b-bf16-lora16qv-b2s2048", "llama-3.1-8b", finetune="lora", batch=2, seq=2048,
        lora_targets=["q_proj", "v_proj"]),
    cfg("l8b-bf16-full-adamw-b1s1024", "llama-3.1-8b", batch=1, seq=1024),
    cfg("l8b-bf16-full-sgd-b2s2048-ckpt", "llama-3.1-8b", optimizer="sgd", batch=2, seq=2048, ckpt=True),
    cfg("l8b-bf16-lora16-b1s2048-eager", "llama-3.1-8b", finetune="lora", batch=1, seq=2048, attention="eager"),
    cfg("q05b-bf16-full-adamw-b8s1024", "qwen2.5-0.5b", batch=8),
    cfg("q05b-ampbf16-full-adamw-b4s1024", "qwen2.5-0.5b", precision="amp-bf16"),
    cfg("q05b-fp32-full-adamw-b4s512", "qwen2.5-0.5b", precision="fp32", seq=512),
    cfg("q05b-bf16-lora16-b8s2048", "qwen2.5-0.5b", finetune="lora", batch=8, seq=2048),
    cfg("q05b-bf16-full-adamw-b8s2048-ckpt", "qwen2.5-0.5b", batch=8, seq=2048, ckpt=True),
    cfg("q05b-bf16-full-adafactor-b4s1024", "qwen2.5-0.5b", optimizer="adafactor"),
    cfg("q7b-bf16-lora16-b2s2048", "qwen2.5-7b", finetune="lora", batch=2, seq=2048),
    cfg("l2-7b-bf16-lora16-b4s2048", "llama-2-7b", finetune="lora", batch=4, seq=2048),
    cfg("l2-7b-bf16-full-adamw-b1s2048", "llama-2-7b", batch=1, seq=2048),
    cfg("l2-7b-bf16-lora16-b2s1024-eager", "llama-2-7b", finetune="lora", batch=2, seq=1024, attention="eager"),
    cfg("l2-7b-bf16-full-sgdm-b2s1024-ckpt", "llama-2-7b", optimizer="sgd-momentum", batch=2, ckpt=True),
    cfg("m7b-bf16-lora16-b4s2048", "mistral-7b", finetune="lora", batch=4, seq=2048),
    cfg("m7b-bf16-lora16-b8s4096-ckpt", "mistral-7b", finetune="lora", batch=8, seq=4096, ckpt=True),
]


def environment():
    import torch
    import transformers
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0]}
    try:
        import peft
        env["peft"] = peft.__version__
    except ImportError:
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        if isinstance(env["driver"], bytes):
            env["driver"] = env["driver"].decode()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        env["gpu_total_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
    except Exception as e:  # NVML is optional for the measurement itself
        env["nvml_error"] = str(e)
    return env


def nvml_used():
    try:
        import pynvml
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
    except Exception:
        return None


def build_optimizer(spec, params):
    import torch
    opt, impl = spec["optimizer"], spec["optimizer_impl"]
    kw = {}
    if opt == "adamw":
        if impl == "fused":
            kw["fused"] = True
        elif impl == "for-loop":
            kw["foreach"] = False
        else:
            kw["foreach"] = True
        return torch.optim.AdamW(params, lr=1e-5, **kw)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=(impl != "for-loop"))
    if opt == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=(impl != "for-loop"))
    if opt == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, foreach=(impl != "for-loop"))
    raise ValueError(f"optimizer {opt} not measurable here")


def run_one(spec, steps):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    t_start = time.time()
    preset = json.load(open(os.path.join(ROOT, "resources", "models", spec["model"] + ".json")))
    hf = dict(preset["config"])
    hf["use_cache"] = False
    model_type = hf.pop("model_type")
    hf.pop("architectures", None)
    config = AutoConfig.for_model(model_type, **hf)
    amp = spec["precision"].startswith("amp-")
    pdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
              "amp-bf16": torch.float32, "amp-fp16": torch.float32}[spec["precision"]]
    cdtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(spec["precision"])
    torch.manual_seed(0)
    torch.set_default_dtype(pdtype)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=pdtype, attn_implementation=spec["attention"])
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, torch_dtype=pdtype,
                                                     attn_implementation=spec["attention"])
    torch.set_default_dtype(torch.float32)
    if spec["grad_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec["finetune"] == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=spec["lora_rank"], lora_alpha=spec["lora_alpha"],
                                                 lora_dropout=spec["lora_dropout"],
                                                 target_modules=spec["lora_targets"], task_type="CAUSAL_LM"))
    model.train()
    torch.cuda.synchronize()
    t_built = time.time()

    params = [p for p in model.parameters() if p.requires_grad]
    info = {
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_trainable": sum(p.numel() for p in params),
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "trainable_dtypes": sorted({str(p.dtype) for p in params}),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }
    opt = build_optimizer(spec, params)
    b, s = spec["batch"], spec["seq"]
    ids = torch.randint(0, config.vocab_size, (b, s), device="cuda")
    after_load = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}

    def phase(fn):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        t0 = time.time()
        out = fn()
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
        return out, {"before_allocated": before,
                     "peak_allocated": st["allocated_bytes.all.peak"],
                     "peak_reserved": st["reserved_bytes.all.peak"],
                     "allocated": st["allocated_bytes.all.current"],
                     "reserved": st["reserved_bytes.all.current"],
                     "alloc_retries": st.get("num_alloc_retries", 0), "ooms": st.get("num_ooms", 0),
                     "seconds": time.time() - t0}

    def fwd():
        ctx = torch.autocast("cuda", dtype=cdtype) if amp else torch.autocast("cuda", enabled=False)
        with ctx:
            return model(input_ids=ids, labels=ids).loss

    step_records = []
    oom = None
    for step in range(1 + steps):
        rec = {"step": step}
        try:
            loss, rec["forward"] = phase(fwd)
            _, rec["backward"] = phase(lambda: loss.backward())
            del loss
            _, rec["optimizer"] = phase(lambda: opt.step())
            _, rec["zero_grad"] = phase(lambda: opt.zero_grad(set_to_none=True))
        except torch.OutOfMemoryError as e:
            oom = {"step": step, "message": str(e).split("\n")[0]}
            step_records.append(rec)
            break
        rec["nvml_used"] = nvml_used()
        rec["mem_get_info_free"], rec["mem_get_info_total"] = torch.cuda.mem_get_info()
        step_records.append(rec)
    optimizer_state_bytes = 0
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.is_cuda:
                optimizer_state_bytes += v.numel() * v.element_size()
    info["optimizer_state_bytes"] = optimizer_state_bytes
    return {"spec": spec, "info": info, "environment": environment(), "after_load": after_load,
            "steps": step_records, "oom": oom,
            "timing": {"build_s": t_built - t_start, "total_s": time.time() - t_start}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="hf_reference.json")
    ap.add_argument("--only", default="")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--one", default="")
    a = ap.parse_args()
    by_name = {c["name"]: c for c in CONFIGS}
    if a.list:
        print("\n".join(by_name))
        return
    if a.one:
        res = run_one(by_name[a.one], a.steps)
        json.dump(res, open(a.out, "w"))
        return
    names = [n for n in a.only.split(",") if n] or list(by_name)
    t0 = time.time()
    results = {"schema_version": 1, "kind": "hf_reference", "environment": None, "results": []}
    for n in names:
        left = a.deadline_s - (time.time() - t0)
        if left < 20:
            results.setdefault("skipped", []).append(n)
            continue
        tmp = a.out + ".one"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            p = subprocess.run([sys.executable, __file__, "--one", n, "--out", tmp, "--steps", str(a.steps)],
                               env=env, timeout=max(left - 5, 10), capture_output=True, text=True)
            if p.returncode == 0:
                r = json.load(open(tmp))
            else:
                r = {"spec": by_name[n], "error": p.stderr[-2000:]}
        except subprocess.TimeoutExpired:
            r = {"spec": by_name[n], "error": "timeout"}
        results["results"].append(r)
        fw = r.get("steps", [{}])[-1].get("forward", {}).get("peak_allocated") if "steps" in r else None
        print(f"{time.time() - t0:6.1f}s {n}: {'ERR' if 'error' in r else 'ok'} fwd_peak={fw}", flush=True)
        if results["environment"] is None and "environment" in r:
            results["environment"] = r["environment"]
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
