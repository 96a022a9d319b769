#!/usr/bin/env python3
"""lab/warmworker.sh's Python half: time headroom-probe --engine transformers from launch to its
result line and to exit, fresh and through a warm worker, and compare peaks with lab/plain_step.py."""
import json
import os
import subprocess
import sys
import tempfile
import time

from enginetime import timed  # lab/ is the script's folder, first on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT, PROBE, NAMES = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3].split(",")
plan = json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))


def probe(req, env):
    return timed([PROBE, "--engine", "transformers", "--request", req], env)


def peaks_of(phases):
    return [(p["phase"], p["step"], p.get("peak_allocated_bytes"), p.get("peak_reserved_bytes")) for p in phases]


sock = os.path.join(tempfile.mkdtemp(prefix="hrw-"), "engine.sock")
t0 = time.perf_counter()
worker = subprocess.Popen([PROBE, "--engine", "transformers", "--serve", sock, "--idle-s", "600"],
                          stdout=subprocess.PIPE, text=True)
ready = json.loads(worker.stdout.readline())
print(f"worker ready in {time.perf_counter() - t0:.2f} s: {ready}", flush=True)
fresh_env = dict(os.environ)
warm_env = dict(os.environ, HEADROOM_ENGINE_WORKER=sock)
out = open(os.path.join(OUT, "warm.jsonl"), "w")
for name in NAMES:
    job = next(j for j in plan["jobs"] if j["name"] == name)
    req = os.path.join(tempfile.gettempdir(), name + ".request.json")
    json.dump(job["request"], open(req, "w"))
    for mode in ("fresh", "warm", "warm", "warm", "fresh", "plain-imports-first", "plain"):
        if mode.startswith("plain"):
            res = os.path.join(tempfile.gettempdir(), name + ".plain.json")
            t = time.perf_counter()
            args = [sys.executable, os.path.join(ROOT, "lab", "plain_step.py"), "--request", req, "--out", res]
            if mode == "plain-imports-first":
                args.append("--imports-first")
            rc = subprocess.call(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dt = time.perf_counter() - t
            peaks = peaks_of(json.load(open(res))["phases"]) if rc == 0 else []
            row = {"name": name, "mode": mode, "rc": rc, "to_exit_s": round(dt, 3), "peaks": peaks}
        else:
            rc, tr, te, result, err = probe(req, warm_env if mode == "warm" else fresh_env)
            row = {"name": name, "mode": mode, "rc": rc, "to_result_s": tr and round(tr, 3), "to_exit_s": round(te, 3),
                   "worker": (result or {}).get("engine_info", {}).get("worker"),
                   "budget": (result or {}).get("engine_info", {}).get("timing"),
                   "timing": (result or {}).get("timing"), "peaks": peaks_of((result or {}).get("phases", []))}
            if rc != 0:
                row["stderr"] = err[-2000:]
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps({k: row.get(k) for k in ("name", "mode", "rc", "to_result_s", "to_exit_s")}), flush=True)
worker.terminate()
worker.wait(30)
