#!/usr/bin/env python3
"""The session's last H200 call (lab/final.sh): per-rank allocation streams of the
two-ranks-on-one-GPU corpus runs, the LibTorch probe against the transformers engine's corpus
results, and the headline timing (Llama-3.1-8B LoRA r16, b4 x 2048) for both engines.
Everything lands under OUT/final as it is made, so a run cut short still leaves its data."""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "probes", "headroom_engine.py")
RANKS = ["share2-l1b-ampbf16-full-adamw-b2s1024-z1", "share2-l1b-ampbf16-full-adamw-b2s1024-z2",
         "share2-l1b-bf16-full-adamw-b2s1024-z3", "share2-l1b-bf16-lora16-b2s1024-z3",
         "share2-l1b-bf16-full-adamw-b2s1024-ga2-z0"]
LIBTORCH = ["l1b-bf16-full-adamw-b4s1024", "l1b-bf16-lora16-b4s2048", "l1b-ampbf16-full-adamw-b4s1024",
            "l1b-bf16-full-adamw-b4s1024-ga2", "l1b-bf16-full-adafactor-b4s1024", "l1b-ampbf16-lora16-b4s1024",
            "q05b-bf16-full-adamw-b8s1024", "q3-06b-bf16-full-adamw-b4s1024", "m7b-bf16-lora16-b2s2048",
            "l1b-bf16-full-adamw-b4s1024-ckpt", "l1b-bf16-full-sgd-b4s1024", "g2b-bf16-full-adamw-b2s1024"]
HEADLINE = "l8b-bf16-lora16-b4s2048"


def log(out, msg):
    print(msg, flush=True)
    with open(os.path.join(out, "run.log"), "a") as f:
        f.write(msg + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-s", type=float, default=380)
    ap.add_argument("--build-pid", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    left = lambda: a.deadline_s - (time.time() - t0)
    os.makedirs(os.path.join(a.out, "ranks"), exist_ok=True)
    plan = {j["name"]: j for j in json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))["jobs"]}
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="2", NCCL_NVLS_ENABLE="0")

    # 1. Two ranks on the one GPU, three jobs at a time, each rank's stream recorded.
    running, queue = [], list(RANKS)
    while queue or running:
        while queue and len(running) < 3 and left() > 120:
            n = queue.pop(0)
            d = os.path.join(a.out, "ranks", n)
            os.makedirs(d, exist_ok=True)
            rp = os.path.join(d, "request.json")
            json.dump(plan[n]["request"], open(rp, "w"))
            cmd = [sys.executable, ENGINE, "--torchrun", "2", "--request", rp, "--steps", "2", "--device", "cuda",
                   "--timeline", os.path.join(d, "timeline.json"), "--rank-dir", d, "--sharding", "fsdp",
                   "--share-gpu"]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "stderr.log"), "w"),
                                 env=env)
            running.append((p, n, time.time()))
            log(a.out, f"[{time.time() - t0:6.1f}s] ranks start {n}")
        for item in list(running):
            p, n, ts = item
            if p.poll() is not None:
                running.remove(item)
                log(a.out, f"[{time.time() - t0:6.1f}s] ranks done {n} rc={p.returncode} in {time.time() - ts:.1f}s")
            elif time.time() - ts > 170 or left() < 100:
                p.kill()
                running.remove(item)
                log(a.out, f"[{time.time() - t0:6.1f}s] ranks KILLED {n}")
        if not queue and not running:
            break
        if not running and queue and left() <= 120:
            log(a.out, f"skipping {queue}")
            break
        time.sleep(0.5)

    # 2. The LibTorch probe, once its build is done.
    probe = os.path.join(ROOT, "build-gpu", "probes", "headroom-probe")
    while a.build_pid and os.path.exists(f"/proc/{a.build_pid}") and left() > 60:
        time.sleep(1)
    if not os.path.exists(probe):
        log(a.out, "no LibTorch probe (build failed or late)")
        return
    corpus = {}
    for line in open(os.path.join(ROOT, "tests", "data", "corpus", "h200.jsonl")):
        r = json.loads(line)
        corpus[r["name"]] = r.get("result")
    rows = []

    def run_probe(n, engine="libtorch"):
        rp = os.path.join(a.out, f"{n}.request.json")
        req = dict(plan[n]["request"])
        json.dump(req, open(rp, "w"))
        ts = time.time()
        cmd = [probe, "--engine", engine, "--request", rp, "--out", os.path.join(a.out, f"{n}.{engine}.json")]
        if engine == "transformers":
            cmd += ["--python", sys.executable]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, min(90, left() - 20)))
        with open(os.path.join(a.out, f"{n}.{engine}.stderr.log"), "w") as f:
            f.write(p.stderr)
        return p.returncode, time.time() - ts, p.stderr[-600:]

    for n in [HEADLINE] + LIBTORCH:
        if left() < 45:
            log(a.out, f"out of time before {n}")
            break
        try:
            rc, wall, err = run_probe(n)
        except subprocess.TimeoutExpired:
            log(a.out, f"{n}: timeout")
            continue
        res = {}
        path = os.path.join(a.out, f"{n}.libtorch.json")
        if rc == 0 and os.path.exists(path):
            res = json.load(open(path))
        ref = corpus.get(n) or {}
        pk = res.get("peak", {}).get("allocated_bytes", 0)
        rv = res.get("peak", {}).get("reserved_bytes", 0)
        epk = ref.get("peak", {}).get("allocated_bytes", 1)
        erv = ref.get("peak", {}).get("reserved_bytes", 1)
        row = {"name": n, "rc": rc, "wall_s": round(wall, 2), "libtorch_peak_allocated": pk, "engine_peak_allocated": epk,
               "libtorch_peak_reserved": rv, "engine_peak_reserved": erv, "stderr": err if rc else ""}
        rows.append(row)
        json.dump(rows, open(os.path.join(a.out, "libtorch_vs_engine.json"), "w"), indent=1)
        log(a.out, f"[{time.time() - t0:6.1f}s] {n:38s} rc={rc} {wall:5.1f}s alloc {100 * (pk - epk) / epk:+7.3f}% "
                   f"reserved {100 * (rv - erv) / erv:+7.3f}%" + ("" if rc == 0 else " " + err[-200:].replace("\n", " ")))
    # 3. The headline timing: the LibTorch probe once more, then the transformers engine.
    timing = []
    for engine in ["libtorch", "transformers"]:
        if left() < (45 if engine == "libtorch" else 40):
            break
        try:
            rc, wall, err = run_probe(HEADLINE, engine)
        except subprocess.TimeoutExpired:
            continue
        timing.append({"engine": engine, "rc": rc, "wall_s": round(wall, 3)})
        json.dump(timing, open(os.path.join(a.out, "timing.json"), "w"), indent=1)
        log(a.out, f"[{time.time() - t0:6.1f}s] timing {engine}: rc={rc} {wall:.2f}s")


if __name__ == "__main__":
    main()
