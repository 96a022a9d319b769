#!/usr/bin/env python3
"""How long headroom-probe takes to stop after SIGTERM (issue 15's "within a second").

The tests hold what a stop does (tests/tst_probe.cpp, tst_engine.cpp: it stops at its next check,
says so, exits 143); the time it takes is a figure of the machine, so it is measured here, over
several runs, and quoted as a median in docs/performance.md. Four cases, all on the CPU:

  step     the LibTorch probe in the middle of a step (hidden 256, 8 layers, b2 x 512, fp32)
  engine   the transformers engine (tests/data/engine/tinylm.py, b8 x 512, 8 micro-batches),
           the signal passed on by the launcher to the Python process
  stdin    the probe waiting for its request on a stdin that stays open
  build    the probe initialising Qwen2.5-1.5B's weights (bf16, LoRA), 300 ms into the build

Usage: python3 bench/stop.py [BUILD_DIR] [--runs N]
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny(hidden=64, layers=2, inter=128):
    return {"headroom": {"id": "tiny", "name": "tiny llama"},
            "config": {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hidden // 4,
                       "intermediate_size": inter, "vocab_size": 256, "max_position_embeddings": 512}}


def request(model, **config):
    c = {"precision": "fp32", "optimizer": "adamw", "optimizer_impl": "foreach", "finetune": "full",
         "micro_batch": 2, "seq_len": 64, "grad_accum": 1, "grad_checkpointing": False, "attention": "sdpa"}
    c.update(config)
    return {"schema_version": 1, "kind": "probe_request", "steps": 1000, "device": "cpu", "model": model,
            "config": c}


def wait_for(proc, needle, deadline_s=300):
    """Reads stdout lines until one contains needle."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the probe ended before %r" % needle)
        if needle in line:
            return
    raise RuntimeError("no %r within %d s" % (needle, deadline_s))


def stop_ms(proc):
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.stdout.read()
    code = proc.wait(timeout=120)
    ms = (time.monotonic() - t) * 1000
    if code != 128 + signal.SIGTERM:
        raise RuntimeError("exit %d, not 143" % code)
    return ms


def sigterm_caught(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return (int(line.split()[1], 16) >> (signal.SIGTERM - 1)) & 1
    return 0


def case(name, probe, tmp):
    env = dict(os.environ)
    if name == "step":
        m = tiny(256, 8, 1024)
        req, args = request(m, seq_len=512), []
    elif name == "engine":
        req = request(tiny(), micro_batch=8, seq_len=512, grad_accum=8)
        args = ["--engine", "transformers", "--model-factory", os.path.join(ROOT, "tests/data/engine/tinylm.py")]
        env.setdefault("HEADROOM_PYTHON", "/usr/bin/python3")
    elif name == "build":
        req = request({"headroom": {"id": "qwen2.5-1.5b"}}, precision="bf16", finetune="lora", micro_batch=1)
        req["model"] = {"headroom": {"id": "qwen2.5-1.5b", "name": "Qwen2.5-1.5B"},
                        "config": {"model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28,
                                   "num_attention_heads": 12, "num_key_value_heads": 2,
                                   "intermediate_size": 8960, "vocab_size": 151936,
                                   "max_position_embeddings": 32768, "tie_word_embeddings": True}}
        req["config"]["lora_rank"] = 16
        args = ["--device", "cpu"]
    if name == "stdin":
        proc = subprocess.Popen([probe, "--request", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        while not sigterm_caught(proc.pid):
            time.sleep(0.01)
        time.sleep(0.2)
        return stop_ms(proc)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(req, f)
    proc = subprocess.Popen([probe, "--request", path] + args, stdout=subprocess.PIPE, text=True, env=env)
    if name == "build":
        while not sigterm_caught(proc.pid):
            time.sleep(0.01)
        time.sleep(0.3)
    else:
        wait_for(proc, '"step":1')  # step 0 is the warm-up; the first measured one is under way
    return stop_ms(proc)


def main():
    argv = [a for a in sys.argv[1:]]
    runs = 7
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    build = argv[0] if argv else os.path.join(ROOT, "build/dev")
    probe = os.path.join(build, "probes/headroom-probe")
    print("SIGTERM to exit, %d runs each, %s (%d cores)" % (runs, os.uname().nodename, os.cpu_count()))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("step", "engine", "stdin", "build"):
            ms = [case(name, probe, tmp) for _ in range(runs)]
            print("%-7s min %7.1f  median %7.1f  max %7.1f ms" % (name, min(ms), statistics.median(ms), max(ms)))


if __name__ == "__main__":
    main()
