#!/usr/bin/env python3
"""The fused linear cross-entropy on the H200 (lab/fused.sh): each configuration with HF's
loss and with the fused one, through the LibTorch probe (its Liger-pattern chunked loss), each in
a fresh process; and through the transformers engine with liger-kernel where it is installed.
Results land under OUT as they are made: <name>.<loss>.<engine>.json and run.log."""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = ["l1b-bf16-lora16-b4s2048", "l1b-bf16-full-adamw-b4s1024", "q05b-bf16-full-adamw-b8s1024",
        "q05b-bf16-lora16-b4s2048", "l8b-bf16-lora16-b4s2048", "q3-06b-bf16-full-adamw-b4s1024",
        "l1b-bf16-full-adamw-b4s1024-ckpt", "m7b-bf16-lora16-b2s2048", "l3b-bf16-full-adamw-b2s2048"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-s", type=float, default=200)
    ap.add_argument("--engines", default="libtorch,transformers",
                    help="which engines to run (the transformers engine only where liger-kernel imports)")
    a = ap.parse_args()
    t0 = time.time()
    left = lambda: a.deadline_s - (time.time() - t0)
    plan = {j["name"]: j for j in json.load(open(os.path.join(ROOT, "lab", "corpus-plan.json")))["jobs"]}
    probe = os.path.join(ROOT, "build-gpu", "probes", "headroom-probe")
    logf = open(os.path.join(a.out, "run.log"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    try:
        import liger_kernel.transformers  # noqa: F401 (imported to see that it works here)
        liger = True
        log(f"liger_kernel: {getattr(__import__('liger_kernel'), '__version__', 'source tree')} from "
            f"{os.path.dirname(liger_kernel.transformers.__file__)}")
    except Exception as e:  # not installed, or its imports fail against this stack
        liger = False
        log(f"liger_kernel: not usable ({type(e).__name__}: {str(e)[:200]}); the transformers engine is not run")
    wanted = a.engines.split(",")
    for n in JOBS:
        for loss in ("standard", "fused"):
            for engine in [e for e in (["libtorch", "transformers"] if liger else ["libtorch"]) if e in wanted]:
                if left() < 20:
                    log(f"out of time before {n} {loss} {engine}")
                    return
                req = json.loads(json.dumps(plan[n]["request"]))
                req["config"]["loss"] = loss
                rp = os.path.join(a.out, f"{n}.{loss}.request.json")
                json.dump(req, open(rp, "w"))
                outp = os.path.join(a.out, f"{n}.{loss}.{engine}.json")
                cmd = [probe, "--engine", engine, "--request", rp, "--out", outp]
                if engine == "transformers":
                    cmd += ["--python", sys.executable]
                ts = time.time()
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, min(60, left() - 10)))
                    rc, err = p.returncode, p.stderr[-300:]
                except subprocess.TimeoutExpired:
                    rc, err = -1, "timeout"
                except OSError as e:
                    rc, err = -2, str(e)
                pk = json.load(open(outp)).get("peak", {}) if rc == 0 and os.path.exists(outp) else {}
                log(f"[{time.time() - t0:6.1f}s] {n:34s} {loss:8s} {engine:12s} rc={rc} {time.time() - ts:5.1f}s "
                    f"alloc {pk.get('allocated_bytes', 0)} reserved {pk.get('reserved_bytes', 0)}"
                    + ("" if rc == 0 else " " + err.replace("\n", " ")))


if __name__ == "__main__":
    main()
