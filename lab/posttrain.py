#!/usr/bin/env python3
"""The cases of lab/dpo.sh and lab/posttrain.sh (issue 29): post-training steps as TRL runs them
(probes/hrengine/posttrain.py: DPO, KTO, ORPO, reward modelling, GRPO), each with its allocator
timeline, beside a supervised step of the same model at the same tokens. --set names the plan's
cases; --predict HEADROOM_CLI prints their estimates instead (committed before they run)."""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "probes", "headroom_engine.py")
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name: (preset, finetune, micro_batch (pairs; KTO: sequences), seq_len, checkpointing, reference, mode[, prompt_len])
DPO = {
    "l1b-dpo-lora-b2s1024": ("llama-3.2-1b", "lora", 2, 1024, False, "adapter", "dpo"),
    "l1b-dpo-lora-ckpt-b4s1024": ("llama-3.2-1b", "lora", 4, 1024, True, "adapter", "dpo"),
    "l1b-dpo-full-copy-b1s1024": ("llama-3.2-1b", "full", 1, 1024, False, "copy", "dpo"),
    "l1b-dpo-full-none-b1s1024": ("llama-3.2-1b", "full", 1, 1024, False, "none", "dpo"),
    "l1b-dpo-full-copy-ckpt-b2s2048": ("llama-3.2-1b", "full", 2, 2048, True, "copy", "dpo"),
    "l1b-sft-lora-b4s1024": ("llama-3.2-1b", "lora", 4, 1024, False, None, "sft"),
    "l8b-dpo-lora-b1s2048": ("llama-3.1-8b", "lora", 1, 2048, False, "adapter", "dpo"),
    "l8b-dpo-lora-ckpt-b2s2048": ("llama-3.1-8b", "lora", 2, 2048, True, "adapter", "dpo"),
    "q05-dpo-full-copy-b2s1024": ("qwen2.5-0.5b", "full", 2, 1024, False, "copy", "dpo"),
    # held out: measured after the estimate was written (prompt lengths other than half, another
    # model with adapters, precomputed and checkpointed)
    "l1b-dpo-lora-p256-b4s1024": ("llama-3.2-1b", "lora", 4, 1024, False, "adapter", "dpo", 256),
    "q05-dpo-lora-b4s2048": ("qwen2.5-0.5b", "lora", 4, 2048, False, "adapter", "dpo"),
    "l1b-dpo-full-none-ckpt-b2s2048": ("llama-3.2-1b", "full", 2, 2048, True, "none", "dpo"),
    "l8b-dpo-lora-ckpt-p768-b4s1024": ("llama-3.1-8b", "lora", 4, 1024, True, "adapter", "dpo", 768),
}

# 2026-12-05: reward models (AutoModelForSequenceClassification, TRL's RewardTrainer), KTO (the KL
# batch; the reference as the disabled adapter, a copy or none) and ORPO (no reference)
POSTTRAIN = {
    "l1b-rm-full-b4s1024": ("llama-3.2-1b", "full", 4, 1024, False, None, "reward"),
    "l1b-rm-lora-b8s1024": ("llama-3.2-1b", "lora", 8, 1024, False, None, "reward"),
    "l8b-rm-lora-b2s2048": ("llama-3.1-8b", "lora", 2, 2048, False, None, "reward"),
    "l8b-rm-lora-ckpt-b4s2048": ("llama-3.1-8b", "lora", 4, 2048, True, None, "reward"),
    "q05-rm-full-b8s1024": ("qwen2.5-0.5b", "full", 8, 1024, False, None, "reward"),
    "l1b-kto-lora-b4s1024": ("llama-3.2-1b", "lora", 4, 1024, False, "adapter", "kto"),
    "l1b-kto-lora-ckpt-b8s1024": ("llama-3.2-1b", "lora", 8, 1024, True, "adapter", "kto"),
    "l1b-kto-full-copy-b2s1024": ("llama-3.2-1b", "full", 2, 1024, False, "copy", "kto"),
    "l1b-kto-full-none-b2s1024": ("llama-3.2-1b", "full", 2, 1024, False, "none", "kto"),
    "l8b-kto-lora-ckpt-b4s2048": ("llama-3.1-8b", "lora", 4, 2048, True, "adapter", "kto"),
    "l1b-orpo-lora-b2s1024": ("llama-3.2-1b", "lora", 2, 1024, False, "none", "orpo"),
    "l1b-orpo-full-b2s1024": ("llama-3.2-1b", "full", 2, 1024, False, "none", "orpo"),
    "l8b-orpo-lora-ckpt-b2s2048": ("llama-3.1-8b", "lora", 2, 2048, True, "none", "orpo"),
    "q05-orpo-lora-b4s1024": ("qwen2.5-0.5b", "lora", 4, 1024, False, "none", "orpo"),
    # held out: reward steps predicted before they ran (predictions-reward.tsv)
    "q05-rm-lora-ckpt-b4s2048": ("qwen2.5-0.5b", "lora", 4, 2048, True, None, "reward"),
    "l1b-rm-full-ckpt-b8s2048": ("llama-3.2-1b", "full", 8, 2048, True, None, "reward"),
    "l8b-rm-lora-b4s1024": ("llama-3.1-8b", "lora", 4, 1024, False, None, "reward"),
}

# held out: KTO and ORPO steps predicted before they ran (predictions-heldout.tsv)
HELDOUT = {
    "q05-kto-lora-b8s2048": ("qwen2.5-0.5b", "lora", 8, 2048, False, "adapter", "kto"),
    "l8b-kto-lora-b2s2048": ("llama-3.1-8b", "lora", 2, 2048, False, "adapter", "kto"),
    "l1b-kto-full-copy-ckpt-b4s2048": ("llama-3.2-1b", "full", 4, 2048, True, "copy", "kto"),
    "l1b-kto-lora-p256-b4s1024": ("llama-3.2-1b", "lora", 4, 1024, False, "adapter", "kto", 256),
    "l1b-orpo-lora-ckpt-b4s2048": ("llama-3.2-1b", "lora", 4, 2048, True, "none", "orpo"),
    "q05-orpo-full-b4s1024": ("qwen2.5-0.5b", "full", 4, 1024, False, "none", "orpo"),
    "l8b-orpo-lora-b2s1024": ("llama-3.1-8b", "lora", 2, 1024, False, "none", "orpo"),
    "l1b-orpo-lora-p768-b2s1024": ("llama-3.2-1b", "lora", 2, 1024, False, "none", "orpo", 768),
}

# 2026-12-05 (later): GRPO (TRL's GRPOTrainer, use_vllm=False: HF generate, then the step), all
# predicted before any ran (tests/data/h200/grpo-plan/predictions.tsv). name: (preset, finetune,
# micro_batch (completions), seq_len (prompt + completion), checkpointing, reference, "grpo",
# prompt_len, grad_accum, beta)
GRPO = {
    "l1b-grpo-lora-b4g2-p256s512": ("llama-3.2-1b", "lora", 4, 512, False, "none", "grpo", 256, 2, 0.0),
    "l1b-grpo-lora-ckpt-ref-b4g2-p128s512": ("llama-3.2-1b", "lora", 4, 512, True, "adapter", "grpo", 128, 2, 0.04),
    "l1b-grpo-full-copy-b2g2-p256s512": ("llama-3.2-1b", "full", 2, 512, False, "copy", "grpo", 256, 2, 0.04),
    "l1b-grpo-full-b4g1-p256s768": ("llama-3.2-1b", "full", 4, 768, False, "none", "grpo", 256, 1, 0.0),
    "q05-grpo-lora-b8g1-p128s640": ("qwen2.5-0.5b", "lora", 8, 640, False, "none", "grpo", 128, 1, 0.0),
    "q05-grpo-full-ckpt-b4g2-p64s1088": ("qwen2.5-0.5b", "full", 4, 1088, True, "none", "grpo", 64, 2, 0.0),
    "l8b-grpo-lora-ckpt-ref-b4g2-p256s768": ("llama-3.1-8b", "lora", 4, 768, True, "adapter", "grpo", 256, 2, 0.04),
    "l8b-grpo-lora-b2g2-p512s768": ("llama-3.1-8b", "lora", 2, 768, False, "none", "grpo", 512, 2, 0.0),
}

# 2026-12-05 (sixteenth session): the post-training modes under QLoRA (bitsandbytes' 4-bit base,
# prepare_model_for_kbit_training's fp32 casts), predicted before they ran
# (tests/data/h200/combos-plan/predictions.tsv); lab/posttrain.sh builds bitsandbytes for this set
# from the carried build-bnb/ (lab/bnb.sh says how it is laid out).
COMBOS = {
    "l1b-dpo-qlora-b2s1024": ("llama-3.2-1b", "qlora", 2, 1024, False, "adapter", "dpo"),
    "l8b-dpo-qlora-ckpt-b2s2048": ("llama-3.1-8b", "qlora", 2, 2048, True, "adapter", "dpo"),
    "q05-dpo-qlora-b4s1024": ("qwen2.5-0.5b", "qlora", 4, 1024, False, "adapter", "dpo"),
    "l1b-kto-qlora-b4s1024": ("llama-3.2-1b", "qlora", 4, 1024, False, "adapter", "kto"),
    "l8b-kto-qlora-ckpt-b2s2048": ("llama-3.1-8b", "qlora", 2, 2048, True, "adapter", "kto"),
    "l1b-orpo-qlora-ckpt-b2s2048": ("llama-3.2-1b", "qlora", 2, 2048, True, "none", "orpo"),
    "l8b-orpo-qlora-b1s2048": ("llama-3.1-8b", "qlora", 1, 2048, False, "none", "orpo"),
    "l1b-rm-qlora-b4s1024": ("llama-3.2-1b", "qlora", 4, 1024, False, None, "reward"),
    "l8b-rm-qlora-ckpt-b2s2048": ("llama-3.1-8b", "qlora", 2, 2048, True, None, "reward"),
}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vl  # noqa: E402  (issue 30's vision-language cases)

# 2026-12-06: CPO and SimPO as TRL's CPOTrainer runs them (the engine's orpo block with trainer cpo),
# against ORPO's estimate at the same settings: (..., prompt tokens, cpo_alpha, loss_type)
CPO = {
    "l1b-cpo-lora-b2s1024": ("llama-3.2-1b", "lora", 2, 1024, False, "none", "orpo", 512, 1.0, "sigmoid"),
    "l1b-simpo-full-b2s1024": ("llama-3.2-1b", "full", 2, 1024, False, "none", "orpo", 512, 0.0, "simpo"),
    "q05-cpo-full-b4s1024": ("qwen2.5-0.5b", "full", 4, 1024, False, "none", "orpo", 512, 1.0, "sigmoid"),
    "q05-simpo-lora-ckpt-b4s2048": ("qwen2.5-0.5b", "lora", 4, 2048, True, "none", "orpo", 1024, 0.0, "simpo"),
    "l8b-cpo-lora-ckpt-b2s2048": ("llama-3.1-8b", "lora", 2, 2048, True, "none", "orpo", 1024, 1.0, "sigmoid"),
}

# IPO (Axolotl rl: ipo, TRL's loss_type ipo): DPOTrainer with loss_types ["ipo"], against DPO's estimate
IPO = {
    "l1b-ipo-lora-b2s1024": ("llama-3.2-1b", "lora", 2, 1024, False, "adapter", "dpo"),
    "q05-ipo-full-copy-b2s1024": ("qwen2.5-0.5b", "full", 2, 1024, False, "copy", "dpo"),
}

SETS = {"ipo": IPO, "cpo": CPO, "dpo": DPO, "posttrain": POSTTRAIN, "heldout": HELDOUT, "grpo": GRPO, "combos": COMBOS, "vl": vl.VL, "vl2": vl.VL2, "vl3": vl.VL3, "vl4": vl.VL4}
CASES = {**DPO, **POSTTRAIN, **HELDOUT, **GRPO, **COMBOS, **CPO, **IPO}


def request(name):
    if name in vl.CASES:
        return vl.request(name)
    preset, ft, b, s, ckpt, ref, mode = CASES[name][:7]
    prompt = CASES[name][7] if len(CASES[name]) > 7 else s // 2
    with open(os.path.join(ROOT, "resources", "models", preset + ".json")) as f:
        model = json.load(f)
    cfg = {"precision": "bf16", "optimizer": "adamw", "optimizer_impl": "foreach", "finetune": ft,
           "micro_batch": b, "seq_len": s, "grad_checkpointing": ckpt, "attention": "sdpa",
           "lora": {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": ALL_LINEAR}}
    if mode != "sft":
        cfg["mode"] = mode
    if mode in ("dpo", "kto", "orpo"):
        cfg[mode] = {"reference": ref, "prompt_len": prompt, "beta": 0.1}
    if name in IPO:  # DPOTrainer's IPO loss on the same log-probabilities
        cfg["dpo"]["loss_type"] = "ipo"
    if name in CPO:  # TRL's CPOTrainer on ORPO's layout: cpo_alpha (SimPO: 0) and the loss
        cfg["orpo"].update(trainer="cpo", cpo_alpha=CPO[name][8], loss_type=CPO[name][9])
    if mode == "grpo":
        ga, beta = CASES[name][8:10]
        cfg["grad_accum"] = ga
        gens = max(g for g in range(2, 9) if (b * ga) % g == 0)
        cfg["grpo"] = {"reference": ref, "prompt_len": prompt, "beta": beta, "num_generations": gens,
                       "temperature": 1.0}
    return {"schema_version": 1, "kind": "probe_request", "model": model, "steps": 2, "device": "cuda",
            "config": cfg}


def predict(names, cli):
    """The estimate of each case before it runs: headroom-cli with the request's settings."""
    cols = ["after_load", "generation", "reference", "forward", "backward", "optimizer"]
    print("\t".join(["name", "peak_allocated_bytes", "peak_reserved_bytes"] + cols))
    for n in names:
        r = request(n)
        c = r["config"]
        args = [cli, "estimate", "--json", "--model", CASES[n][0], "--precision", c["precision"], "--finetune",
                c["finetune"], "--batch", str(c["micro_batch"]), "--seq", str(c["seq_len"]), "--grad-accum",
                str(c.get("grad_accum", 1)), "--mode", c.get("mode", "sft")]
        if c["grad_checkpointing"]:
            args.append("--grad-checkpointing")
        block = c.get(c.get("mode", ""), {})
        if block:
            args += ["--prompt-len", str(block["prompt_len"]), "--dpo-beta", str(block["beta"]),
                     "--dpo-reference", block["reference"]]
        if "num_generations" in block:
            args += ["--num-generations", str(block["num_generations"])]
        d = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        phases = {p["phase"]: p["peak_allocated_bytes"] for p in d["phases"]}
        print("\t".join([n, str(d["peak"]["allocated_bytes"]), str(d["peak"]["reserved_bytes"])] +
                        [str(phases.get(k, "")) for k in cols]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--set", default="dpo", choices=sorted(SETS))
    ap.add_argument("--deadline-s", type=float, default=480)
    ap.add_argument("--predict", metavar="HEADROOM_CLI", help="print the estimates (TSV) instead of running")
    a = ap.parse_args()
    names = [n for n in SETS[a.set] if not a.only or n in a.only.split(",")]
    if a.predict:
        return predict(names, a.predict)
    t0 = time.time()
    with open(os.path.join(a.out, "cases.jsonl"), "a") as log:
        for n in names:
            left = a.deadline_s - (time.time() - t0)
            if left < 30:
                log.write(json.dumps({"name": n, "skipped": "deadline"}) + "\n")
                continue
            rp = os.path.join(a.out, n + ".request.json")
            with open(rp, "w") as f:
                json.dump(request(n), f)
            t1 = time.time()
            try:
                p = subprocess.run([sys.executable, ENGINE, "--request", rp, "--no-attribution", "--timeline",
                                    os.path.join(a.out, n + ".tl.json"), "--out", os.path.join(a.out, n + ".json")],
                                   capture_output=True, text=True, timeout=left)
                rc, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired:
                rc, err = -9, "timeout"
            with open(os.path.join(a.out, n + ".log"), "w") as f:
                f.write(err)
            log.write(json.dumps({"name": n, "rc": rc, "s": round(time.time() - t1, 1)}) + "\n")
            log.flush()
            print(n, rc, round(time.time() - t1, 1), err.strip().splitlines()[-1:] if rc else "", flush=True)


if __name__ == "__main__":
    main()
