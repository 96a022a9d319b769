#!/usr/bin/env python3
"""Runs headroom-probe on the HF reference configurations (see lab/validate.sh)."""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["l1b-bf16-full-adamw-b4s1024", "l1b-bf16-full-adamw-b4s1024-ckpt", "l1b-ampbf16-full-adamw-b4s1024",
         "l1b-bf16-full-sgd-b4s1024", "l1b-bf16-full-adafactor-b4s1024", "l1b-bf16-full-adamw-b2s1024-eager",
         "l1b-bf16-lora16-b4s2048", "l1b-bf16-lora16-b4s2048-ckpt", "l8b-bf16-lora16-b4s2048",
         "l8b-bf16-lora16qv-b2s2048", "l8b-bf16-lora16-b1s2048-eager", "l8b-bf16-full-adamw-b1s1024",
         "q05b-bf16-full-adamw-b8s1024", "q05b-ampbf16-full-adamw-b4s1024", "l1b-bf16-full-sgdm-b4s1024"]


def request(spec):
    preset = json.load(open(os.path.join(ROOT, "resources", "models", spec["model"] + ".json")))
    return {"schema_version": 1, "kind": "probe_request", "model": preset, "steps": 2, "device": "cuda",
            "config": {"precision": spec["precision"], "optimizer": spec["optimizer"],
                       "optimizer_impl": spec["optimizer_impl"], "finetune": spec["finetune"],
                       "micro_batch": spec["batch"], "seq_len": spec["seq"],
                       "grad_checkpointing": spec["grad_checkpointing"], "attention": spec["attention"],
                       "lora": {"rank": spec["lora_rank"], "alpha": spec["lora_alpha"],
                                "dropout": spec["lora_dropout"], "targets": spec["lora_targets"]}}}


def run(probe, req, tag, out):
    path = os.path.join(out, "req.json")
    json.dump(req, open(path, "w"))
    t0 = time.time()
    p = subprocess.run([probe, "--request", path], capture_output=True, text=True, timeout=300)
    wall = time.time() - t0
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    last = json.loads(lines[-1]) if lines else {"event": "none"}
    return p.returncode, wall, last, p.stderr[-1500:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ref = {r["spec"]["name"]: r for r in json.load(open(os.path.join(ROOT, "tests/data/hf_reference_h200.json")))["results"]}
    results = {"schema_version": 1, "kind": "probe_validation", "results": []}
    for name in CASES:
        spec = ref[name]["spec"]
        rc, wall, res, err = run(a.probe, request(spec), name, a.out)
        st = ref[name]["steps"][-1]
        hf = max(st[p]["peak_allocated"] for p in ("forward", "backward", "optimizer"))
        pk = res.get("peak", {}).get("allocated_bytes", 0)
        print(f"{name:38s} rc={rc} wall={wall:5.1f}s probe={pk/2**30:8.3f} hf={hf/2**30:8.3f} err={100*(pk-hf)/hf:+6.2f}%"
              + ("" if rc == 0 else " " + err[-300:]), flush=True)
        results["results"].append({"name": name, "rc": rc, "wall_s": wall, "hf_peak_allocated": hf, "probe": res,
                                   "stderr": err if rc else ""})
        json.dump(results, open(os.path.join(a.out, "probe_h200.json"), "w"), indent=1)
    # Speed: Llama-3.1-8B LoRA r16, batch 4, seq 2048, bf16, 1 warm-up + 2 measured steps.
    timing = []
    for i in range(3):
        rc, wall, res, err = run(a.probe, request(ref["l8b-bf16-lora16-b4s2048"]["spec"]), "speed", a.out)
        timing.append({"rc": rc, "wall_s": wall, "timing": res.get("timing")})
        print(f"speed run {i}: rc={rc} wall={wall:.2f}s {res.get('timing')}", flush=True)
    json.dump(timing, open(os.path.join(a.out, "timing.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
