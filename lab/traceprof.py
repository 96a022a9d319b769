#!/usr/bin/env python3
"""Where the trace's time goes (issue 26: Llama-3.1-8B LoRA b4 x 2048 in 10 s on two cores), and
what a trace without a visible GPU meets. Writes under --out: the 8B request, prof.txt (cProfile of
the whole engine run, pinned to CPUS), nogpu.txt (tiny fake-tensor steps with CUDA_VISIBLE_DEVICES
empty: what fails, and where)."""
import argparse, json, os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import traced

NOGPU = r'''
import sys, traceback, torch
from torch._subclasses.fake_tensor import FakeTensorMode
print("torch", torch.__version__, "cuda available", torch.cuda.is_available(), "built", torch.backends.cuda.is_built())
def attempt(label, fn):
    try:
        fn(); print(label, ": ok")
    except Exception as e:
        print(label, ": FAIL", type(e).__name__, str(e).splitlines()[0][:300])
        traceback.print_exc(limit=4, file=sys.stdout)
def create():
    with FakeTensorMode():
        x = torch.empty(4, 4, device="cuda")
def forward():
    with FakeTensorMode():
        w = torch.empty(4, 4, device="cuda", requires_grad=True)
        y = (torch.empty(8, 4, device="cuda") @ w).sum()
def backward():
    with FakeTensorMode():
        w = torch.empty(4, 4, device="cuda", requires_grad=True)
        y = (torch.empty(8, 4, device="cuda") @ w).sum()
        y.backward()
def meta_backward():
    w = torch.empty(4, 4, device="meta", requires_grad=True)
    y = (torch.empty(8, 4, device="meta") @ w).sum()
    y.backward()
    print("  meta grad", w.grad.shape, w.grad.device)
def sdpa_choice():
    with FakeTensorMode():
        q = torch.empty(1, 16, 128, 64, device="cuda", dtype=torch.bfloat16)
        print("  choice", torch.ops.aten._fused_sdp_choice(q, q, q))
for label, fn in (("create", create), ("forward", forward), ("backward", backward), ("meta_backward", meta_backward), ("sdpa_choice", sdpa_choice)):
    attempt(label, fn)
'''

CHOICE = r'''
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    for hk, mask in ((16, False), (1, False), (1, True), (16, True)):
        q = torch.empty(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(1, hk, 4096, 128, device="cuda", dtype=torch.bfloat16)
        m = torch.empty(1, 1, 4096, 4096, device="cuda", dtype=torch.bool) if mask else None
        print("heads", hk, "mask", mask, "choice", torch.ops.aten._fused_sdp_choice(q, k, k, m))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpus", default="0,1")
    a = ap.parse_args()
    l8b = json.load(open(os.path.join(traced.ROOT, "resources", "models", "llama-3.1-8b.json")))
    req = {"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "model": l8b,
           "config": traced.request("llama", {}, {"finetune": "lora", "micro_batch": 4, "seq_len": 2048,
                                                  "lora": {"rank": 16, "alpha": 32, "dropout": 0.0,
                                                           "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}})["config"]}
    rp = os.path.join(a.out, "l8b.request.json")
    json.dump(req, open(rp, "w"))
    tl = os.path.join(a.out, "l8b.trace-tl.json")
    timing = open(os.path.join(a.out, "timing.jsonl"), "w")
    import sysconfig
    site = sysconfig.get_paths()["purelib"]
    timing.write(json.dumps({"dont_write_bytecode": sys.flags.dont_write_bytecode, "site": site,
                             "site_writable": os.access(site, os.W_OK),
                             "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE")}) + "\n")
    nocache = ("import sys, runpy, torch._dynamo.config as c; c.fake_tensor_cache_enabled = False; "
               "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    # cold: the first run on a fresh machine (its site-packages may have no bytecode yet); warm:
    # the runs after it; nocache: FakeTensorMode's dispatch cache off
    for label, pre in (("cold", []), ("warm", []), ("warm", []), ("nocache", ["-c", nocache]), ("nocache", ["-c", nocache])):
        t0 = time.time()
        p = subprocess.run(["taskset", "-c", a.cpus, sys.executable] + pre + [traced.ENGINE, "--request", rp, "--trace",
                                                                           "--timeline", tl], capture_output=True, text=True)
        wall = time.time() - t0
        t = json.load(open(tl)).get("timing", {}) if p.returncode == 0 else {}
        timing.write(json.dumps({"run": label, "rc": p.returncode, "wall_s": round(wall, 2), **t,
                                 "err": p.stderr[-300:] if p.returncode else ""}) + "\n")
        timing.flush()
    prof = os.path.join(a.out, "prof.out")
    p = subprocess.run(["taskset", "-c", a.cpus, sys.executable, "-m", "cProfile", "-o", prof, traced.ENGINE,
                        "--request", rp, "--trace", "--timeline", tl], capture_output=True, text=True)
    with open(os.path.join(a.out, "prof.txt"), "w") as f:
        f.write(p.stderr[-4000:] + "\n")
        import pstats
        for key in ("cumulative", "tottime"):
            s = pstats.Stats(prof, stream=f)
            s.sort_stats(key).print_stats(60)
    if os.environ.get("NOGPU", "0") != "1":
        return
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    with open(os.path.join(a.out, "nogpu.txt"), "w") as f:
        r = subprocess.run([sys.executable, "-c", NOGPU], capture_output=True, text=True, env=env)
        f.write(r.stdout + r.stderr)
        r = subprocess.run([sys.executable, "-c", CHOICE], capture_output=True, text=True)
        f.write("\n== with the GPU: the CUDA choice on fake tensors\n" + r.stdout + r.stderr[-3000:])


if __name__ == "__main__":
    main()
