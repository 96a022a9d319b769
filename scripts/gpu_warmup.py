#!/usr/bin/env python3
"""H200: the LibTorch probe with its warm-up step (default) against HEADROOM_PROBE_WARMUP=0 (the
optimizer state and cuBLAS workspace made before the first step, no warm-up step), on corpus
configurations the LibTorch engine accepts: per-step peaks, and the time to the result line and to
exit. Writes OUT/warmup.json. Run by scripts/gpu-warmup.sh."""
import argparse, json, os, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--probe", default="build-gpu/probes/headroom-probe")
ap.add_argument("--deadline-s", type=float, default=400)
a = ap.parse_args()
t0 = time.time()
plan = {j["name"]: j for j in json.load(open("scripts/corpus-plan.json"))["jobs"]}
names = ["l8b-bf16-lora16-b4s2048", "l1b-bf16-full-adamw-b4s1024", "q05b-bf16-full-adamw-b8s1024",
         "l1b-bf16-full-adamw-b4s1024-ckpt", "m7b-bf16-lora16-b2s2048", "l1b-ampbf16-full-adamw-b4s1024",
         "q3-06b-bf16-full-adamw-b4s1024", "l1b-bf16-full-sgd-b4s1024", "l1b-bf16-full-adafactor-b4s1024",
         "q05b-fp32-full-adamw-b4s512", "l1b-bf16-full-sgdm-b4s1024", "l8b-bf16-full-adamw-b1s1024",
         "l1b-bf16-full-adamw-b4s1024-expandable", "l1b-ampbf16-lora16-b4s1024"]
rows = []


def once(name, warm):
    job = plan[name]
    req = dict(job["request"])
    req["device"] = "cuda"
    path = f"/tmp/req-{name}.json"
    json.dump(req, open(path, "w"))
    env = dict(os.environ, HEADROOM_PROBE_WARMUP=str(warm))
    if job.get("alloc_conf"):
        env["PYTORCH_CUDA_ALLOC_CONF"] = job["alloc_conf"]
    ts = time.time()
    p = subprocess.Popen([a.probe, "--request", path, "--engine", "libtorch"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    result, t_result = None, None
    for line in p.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "result":
            result, t_result = ev, time.time() - ts
    p.wait()
    t_exit = time.time() - ts
    row = {"name": name, "warmup": warm, "rc": p.returncode, "to_result_s": t_result and round(t_result, 3),
           "to_exit_s": round(t_exit, 3), "stderr": p.stderr.read()[-300:] if p.returncode else ""}
    if result:
        row["peak_allocated"] = result["peak"]["allocated_bytes"] if "peak" in result else None
        row["peak_reserved"] = result["peak"]["reserved_bytes"] if "peak" in result else None
        row["timing"] = result.get("timing")
        row["phases"] = [[x["step"], x["phase"], x["peak_allocated_bytes"], x["peak_reserved_bytes"], x.get("seconds")]
                         for x in result["phases"]]
    rows.append(row)
    print(f"[{time.time() - t0:6.1f}s] {name:40s} warm={warm} rc={p.returncode} result {row['to_result_s']} s "
          f"exit {row['to_exit_s']} s alloc {row.get('peak_allocated')} res {row.get('peak_reserved')}", flush=True)
    json.dump(rows, open(os.path.join(a.out, "warmup.json"), "w"), indent=1)


# Timing first (the GPU idle), alternating: three each on the 8B LoRA case.
for i in range(3):
    for w in (1, 0):
        once("l8b-bf16-lora16-b4s2048", w)
for n in names[1:]:
    if time.time() - t0 > a.deadline_s:
        print("out of time")
        break
    for w in (1, 0):
        once(n, w)
