#!/usr/bin/env python3
"""Where the transformers engine's imports go, and what a process that has them already answers in
(issue 27): cProfile callers of the import, then the engine's main run in a fork of a process that
imported torch, Transformers and PEFT without touching CUDA, beside a fresh process. Results under OUT."""
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1]
names = sys.argv[2].split(",")
plan = json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))
sys.path.insert(0, os.path.join(ROOT, "probes"))

t0 = time.perf_counter()
import torch  # noqa: E402
t_torch = time.perf_counter() - t0
pr = cProfile.Profile()
pr.enable()
t0 = time.perf_counter()
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402,F401
t_tf = time.perf_counter() - t0
t0 = time.perf_counter()
import peft  # noqa: E402,F401
t_peft = time.perf_counter() - t0
pr.disable()
s = io.StringIO()
st = pstats.Stats(pr, stream=s)
st.sort_stats("cumulative").print_stats(60)
st.print_callers("_register_to_dispatcher|_jit_internal.py.*_overload|packages_distributions|sklearn/__init__")
open(os.path.join(OUT, "import-prof.txt"), "w").write(
    f"import torch {t_torch:.3f} s, transformers + AutoModelForCausalLM {t_tf:.3f} s, peft {t_peft:.3f} s\n" + s.getvalue())
print(f"import torch {t_torch:.3f} s, transformers {t_tf:.3f} s, peft {t_peft:.3f} s", flush=True)
import hrengine.main  # noqa: E402
assert not torch.cuda.is_initialized()

rows = []
for name in names:
    job = next(j for j in plan["jobs"] if j["name"] == name)
    req = os.path.join(tempfile.gettempdir(), name + ".request.json")
    json.dump(job["request"], open(req, "w"))
    for mode in ("fresh", "fork", "fork", "fresh"):
        res_path = os.path.join(tempfile.gettempdir(), f"{name}.{mode}.result.json")
        if os.path.exists(res_path):
            os.unlink(res_path)
        t0 = time.perf_counter()
        if mode == "fresh":
            env = dict(os.environ)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "headroom-pyc")
            rc = subprocess.call([sys.executable, os.path.join(ROOT, "probes", "headroom_engine.py"), "--request", req,
                                  "--out", res_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        else:
            pid = os.fork()
            if pid == 0:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                code = hrengine.main.main(["--request", req, "--out", res_path])
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            rc = os.waitstatus_to_exitcode(status)
        dt = time.perf_counter() - t0
        r = json.load(open(res_path)) if os.path.exists(res_path) else {}
        peaks = [(p["phase"], p["step"], p.get("peak_allocated_bytes"), p.get("peak_reserved_bytes")) for p in r.get("phases", [])]
        row = {"name": name, "mode": mode, "rc": rc, "to_exit_s": round(dt, 3), "timing": r.get("timing"),
               "budget": r.get("engine_info", {}).get("timing"), "peaks": peaks}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("name", "mode", "rc", "to_exit_s", "timing")}), flush=True)
with open(os.path.join(OUT, "fork.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
