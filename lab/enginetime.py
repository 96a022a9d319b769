#!/usr/bin/env python3
"""Time the transformers engine from launch to its result line and to exit (lab/enginetime.sh)."""
import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "probes", "headroom_engine.py")
DEFAULT = ["l8b-bf16-lora16-b4s2048", "g2-9b-bf16-lora16-b1s2048", "q3moe-bf16-lora16-b1s2048"]


def timed(cmd, env):
    """Run cmd; (exit code, seconds to its result line, seconds to exit, the result, stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t_result, result = None, None
    for line in p.stdout:
        if '"event":"result"' in line:
            t_result = time.perf_counter() - t0
            result = json.loads(line)
    err = p.stderr.read()
    rc = p.wait()
    return rc, t_result, time.perf_counter() - t0, result, err


def one(req_path, env, extra=()):
    return timed([sys.executable] + list(extra) + [ENGINE, "--request", req_path], env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-profile", action="store_true")
    a = ap.parse_args()
    plan = json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))
    names = [n for n in (a.only.split(",") if a.only else DEFAULT) if n]
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "headroom-pyc")
    tl = open(os.path.join(a.out, "timing.jsonl"), "a")
    for i, name in enumerate(names):
        job = next(j for j in plan["jobs"] if j["name"] == name)
        req = os.path.join(tempfile.gettempdir(), name + ".request.json")
        json.dump(job["request"], open(req, "w"))
        for r in range(a.runs + (1 if i == 0 else 0)):  # the very first run also compiles the bytecode
            rc, tr, te, res, err = one(req, env)
            peaks = [(p["phase"], p["step"], p.get("peak_allocated_bytes"), p.get("peak_reserved_bytes"))
                     for p in (res or {}).get("phases", [])]
            rec = {"name": name, "run": r, "first_run_compiles": i == 0 and r == 0, "rc": rc,
                   "to_result_s": tr and round(tr, 3), "to_exit_s": round(te, 3),
                   "engine_timing": (res or {}).get("timing"),
                   "budget": (res or {}).get("engine_info", {}).get("timing"),
                   "built_on": (res or {}).get("engine_info", {}).get("built_on"), "peaks": peaks}
            if rc != 0:
                rec["stderr"] = err[-3000:]
            tl.write(json.dumps(rec) + "\n")
            tl.flush()
            print(json.dumps({k: rec[k] for k in ("name", "run", "rc", "to_result_s", "to_exit_s", "budget")}),
                  flush=True)
        if not a.no_profile:
            prof = os.path.join(tempfile.gettempdir(), name + ".prof")
            one(req, env, extra=["-m", "cProfile", "-o", prof])
            with open(os.path.join(a.out, f"prof-{name}.txt"), "w") as f:
                st = pstats.Stats(prof, stream=f)
                st.sort_stats("cumulative").print_stats(70)
                st.sort_stats("tottime").print_stats(40)
    if not a.no_profile and names:
        job = next(j for j in plan["jobs"] if j["name"] == names[0])
        req = os.path.join(tempfile.gettempdir(), names[0] + ".request.json")
        rc, tr, te, res, err = one(req, env, extra=["-X", "importtime"])
        rows = []
        for line in err.splitlines():
            if line.startswith("import time:") and "|" in line:
                parts = [x.strip() for x in line[len("import time:"):].split("|")]
                if parts[0].isdigit():
                    rows.append((int(parts[1]), int(parts[0]), parts[2]))
        rows.sort(reverse=True)
        with open(os.path.join(a.out, "importtime.txt"), "w") as f:
            f.write(f"total to result {tr:.2f} s (with -X importtime)\ncumulative_us self_us module\n")
            for c, s_, m in rows[:80]:
                f.write(f"{c:>12} {s_:>9} {m}\n")


if __name__ == "__main__":
    main()
