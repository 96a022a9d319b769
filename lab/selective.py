#!/usr/bin/env python3
"""Selective checkpointing on the H200 (issue 14): corpus configurations with only the first N
decoder layers checkpointed, through the transformers engine (the real stack: HF's
gradient_checkpointing_enable, then layer.gradient_checkpointing = False past N) and the LibTorch
probe. Writes OUT/<name>-ckpt<N>.<engine>.json and OUT/run.log. Run by lab/selective.sh."""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = [("l1b-bf16-full-adamw-b4s1024", 8), ("l8b-bf16-lora16-b4s2048", 16), ("q05b-bf16-full-adamw-b8s1024", 12),
        ("m7b-bf16-lora16-b2s2048", 4)]

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--deadline-s", type=float, default=300)
a = ap.parse_args()
t0 = time.time()
plan = {j["name"]: j for j in json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))["jobs"]}
probe = os.path.join(ROOT, "build-gpu", "probes", "headroom-probe")
log = open(os.path.join(a.out, "run.log"), "a")
for name, n in JOBS:
    for engine in ("transformers", "libtorch"):
        if time.time() - t0 > a.deadline_s:
            print("out of time", file=log, flush=True)
            sys.exit(0)
        req = json.loads(json.dumps(plan[name]["request"]))
        req["config"]["grad_checkpointing"] = True
        req["config"]["checkpoint_layers"] = n
        stem = os.path.join(a.out, f"{name}-ckpt{n}")
        json.dump(req, open(stem + ".request.json", "w"))
        cmd = [probe, "--engine", engine, "--request", stem + ".request.json", "--out", f"{stem}.{engine}.json"]
        if engine == "transformers":
            cmd += ["--python", sys.executable]
        ts = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        pk = json.load(open(f"{stem}.{engine}.json")).get("peak", {}) if p.returncode == 0 else {}
        print(f"[{time.time() - t0:6.1f}s] {name} ckpt{n} {engine} rc={p.returncode} {time.time() - ts:.1f}s "
              f"alloc {pk.get('allocated_bytes')} {p.stderr[-200:] if p.returncode else ''}", file=log, flush=True)
