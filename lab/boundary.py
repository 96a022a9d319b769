#!/usr/bin/env python3
"""Solver boundaries on the H200 (issue 12): for each configuration of lab/boundary-plan.json,
run the transformers engine at the solver's value (max-batch or max-seq, reserve 0), then walk
up by the plan's step until a step runs out of memory (or down until one runs). Each run is a
fresh process, as a user's launch is. Results land under OUT/boundary/<name>/ as they are made.

    python3 lab/boundary.py --out DIR [--deadline-s S] [--only NAME,...]
"""
import argparse, copy, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "probes", "headroom_engine.py")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--only", default="")
    ap.add_argument("--start", default="", help="NAME=VALUE,...: walk from VALUE instead of the plan's solver value")
    a = ap.parse_args()
    t0 = time.time()
    plan = json.load(open(os.path.join(ROOT, "lab", "boundary-plan.json")))
    only = set(filter(None, a.only.split(",")))
    start = {k: int(v) for k, v in (x.split("=") for x in filter(None, a.start.split(",")))}
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="4")
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "run.log"), "a")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    def run(job, value):
        d = os.path.join(a.out, job["name"])
        os.makedirs(d, exist_ok=True)
        req = copy.deepcopy(job["request"])
        req["config"][job["field"]] = value
        req["timeline"] = False
        req["attribution"] = False
        rp = os.path.join(d, f"{value}.request.json")
        out = os.path.join(d, f"{value}.result.json")
        json.dump(req, open(rp, "w"))
        cmd = [sys.executable, ENGINE, "--request", rp, "--out", out, "--steps", "2", "--device", "cuda",
               "--no-attribution"]
        if job.get("alloc_conf"):
            cmd += ["--alloc-conf", job["alloc_conf"]]
        ts = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"{value}.stderr"), "w"),
                               env=env, timeout=max(30, min(240, a.deadline_s - (time.time() - t0))))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        oom = None
        try:
            r = json.load(open(out))
            oom = r.get("oom") is not None
        except Exception:
            pass
        say(f"[{time.time() - t0:6.1f}s] {job['name']} {job['field']}={value} rc={rc} oom={oom} in {time.time() - ts:.1f}s")
        return oom

    for job in plan["jobs"]:
        if only and job["name"] not in only:
            continue
        if a.deadline_s - (time.time() - t0) < 60:
            say(f"skipping {job['name']}: out of time")
            continue
        v, step = start.get(job["name"], job["solver"]), job["step"]
        oom = run(job, v)
        if oom is False:
            for _ in range(4):
                v += step
                if run(job, v) is not False:
                    break
        elif oom is True:
            for _ in range(4):
                v -= step
                if v < 1 or run(job, v) is not True:
                    break


if __name__ == "__main__":
    main()
