#!/usr/bin/env python3
"""Note [Traced depth] on the real stack: each case traced twice, extrapolated from three shallow
depths and at full depth (--trace-full-depth), on two cores each; the two timelines must be the
same event for event. Writes depth.jsonl under --out (name, same, the engine's depth line, both
times); the timelines are deleted."""
import argparse, json, os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import traced

DEEP = {"hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "intermediate_size": 512, "vocab_size": 8192, "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "linear_num_value_heads": 4, "linear_num_key_heads": 2, "sliding_window": 128}


def deep_config(t):
    cfg = traced.small_config(t)  # the type's defaults, the small sizes, lists cut to 4 layers
    from transformers import AutoConfig
    full = AutoConfig.for_model(t).to_dict()
    text = full.get("text_config") if isinstance(full.get("text_config"), dict) else full
    L0 = text.get("num_hidden_layers")
    for k, v in DEEP.items():
        if k in cfg and not isinstance(cfg[k], (list, dict)):
            cfg[k] = v
    n = cfg["num_hidden_layers"]
    for k, v in text.items():  # per-layer lists and patterns at the new depth, from the defaults
        if isinstance(v, (list, str)) and L0 and len(v) == L0 and k != "model_type":
            cfg[k] = (v * ((n + len(v) - 1) // len(v)))[:n] if len(v) < n else v[:n]
    return cfg


def peaks(tl):
    """The highest live bytes in each phase of the last step."""
    live, size, out, marks = 0, {}, {}, tl["marks"]
    bounds = [(m["event"], m["phase"], m["step"]) for m in marks]
    j, cur = 0, None
    for i, e in enumerate(tl["events"]):
        while j < len(bounds) and bounds[j][0] <= i:
            cur = f"{bounds[j][2]}:{bounds[j][1]}"
            j += 1
        if e[0] == 0:
            size[e[1]] = e[2]
            live += e[2]
        elif e[0] == 1:
            live -= size.pop(e[1], 0)
        out[cur] = max(out.get(cur, 0), live)
    return out


def run(out, name, req, full, cpus):
    rp = os.path.join(out, name + ".request.json")
    json.dump(req, open(rp, "w"))
    tl = os.path.join(out, name + (".full" if full else ".ex") + ".json")
    t0 = time.time()
    p = subprocess.run(["taskset", "-c", cpus, sys.executable, traced.ENGINE, "--request", rp, "--trace", "--timeline", tl]
                       + ([] if full else ["--trace-by-depth"]), capture_output=True, text=True, timeout=600)
    return {"rc": p.returncode, "s": round(time.time() - t0, 2), "tl": tl, "err": p.stderr[-400:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = []
    types = os.environ.get("TYPES", "llama,qwen3,qwen3_moe,gemma3_text,phi3,qwen3_5,granite,falcon").split(",")
    for t in types:
        try:
            hf = deep_config(t)
        except Exception as e:
            print(t, "no config", e, flush=True)
            continue
        cases.append((f"{t}-full", traced.request(t, hf, {"micro_batch": 2, "seq_len": 256})))
        cases.append((f"{t}-lora", traced.request(t, hf, {"finetune": "lora", "micro_batch": 2, "seq_len": 256})))
        cases.append((f"{t}-ckpt", traced.request(t, hf, {"grad_checkpointing": True, "micro_batch": 2, "seq_len": 256})))
    l8b = json.load(open(os.path.join(traced.ROOT, "resources", "models", "llama-3.1-8b.json")))
    speed = {"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "model": l8b,
             "config": traced.request("llama", {}, {"finetune": "lora", "micro_batch": 4, "seq_len": 2048,
                                                    "lora": {"rank": 16, "alpha": 32, "dropout": 0.0,
                                                             "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}})["config"]}
    res = open(os.path.join(a.out, "depth.jsonl"), "w")

    def one(i_case):
        i, (name, req) = i_case
        cpus = f"{2 * (i % 6) + 4},{2 * (i % 6) + 5}"
        ex = run(a.out, name, req, False, cpus)
        full = run(a.out, name, req, True, cpus)
        return name, ex, full

    def judge(name, ex, full):
        r = {"name": name, "ex_rc": ex["rc"], "full_rc": full["rc"], "ex_s": ex["s"], "full_s": full["s"]}
        if ex["rc"] == 0 and full["rc"] == 0:
            x, y = json.load(open(ex["tl"])), json.load(open(full["tl"]))
            r["same"] = all(x[k] == y[k] for k in ("events", "marks", "parameters", "model_layout", "frames"))
            r["differ"] = [k for k in ("events", "marks", "parameters", "model_layout", "frames") if x[k] != y[k]]
            ev = [(e[0], e[2]) for e in x["events"]], [(e[0], e[2]) for e in y["events"]]
            first = next((i for i, (p, q) in enumerate(zip(*ev)) if p != q), None)
            r["first_event_differing"] = first
            r["lengths"] = [len(ev[0]), len(ev[1])]
            if first is not None:
                def near(t):  # the events about the first difference, each allocation with its frame
                    return [e + ([t["frames"][e[4]]] if e[0] == 0 and len(e) > 4 else []) for e in t["events"][max(0, first - 3):first + 4]]
                r["near"] = [near(x), near(y)]
            r["marks"] = [t["marks"][:12] for t in (x, y)]
            r["peaks"] = [peaks(x), peaks(y)]
            r["depth"] = x["engine_info"].get("depth")
            r["events"] = len(x["events"])
            r["timing_ex"], r["timing_full"] = x.get("timing"), y.get("timing")
        else:
            r["err"] = (ex["err"] if ex["rc"] else full["err"])[-300:]
        for f in (ex["tl"], full["tl"]):
            if os.path.exists(f):
                os.remove(f)
        return r

    # the 8B first, alone: extrapolated on cores 0,1 and full depth on 2,3 at once; then the cases
    with ThreadPoolExecutor(2) as sp:
        fe = sp.submit(run, a.out, "l8b-lora", speed, False, "0,1")
        ff = sp.submit(run, a.out, "l8b-lora", speed, True, "2,3")
        r = judge("l8b-lora-b4s2048 (2 cores each)", fe.result(), ff.result())
    print(json.dumps(r), flush=True)
    res.write(json.dumps(r) + "\n"); res.flush()
    # The 8B through a warm worker pinned to two cores (the explorer's path: the imports made
    # once, Note [Warm worker]), extrapolated and at full depth, two runs each.
    if os.environ.get("WORKER", "1") == "1":
        import tempfile
        sock = os.path.join(tempfile.mkdtemp(prefix="hrw-"), "engine.sock")
        w = subprocess.Popen(["taskset", "-c", "0,1", sys.executable, traced.ENGINE, "--serve", sock, "--idle-s", "300"],
                             stdout=subprocess.PIPE, text=True)
        ready = w.stdout.readline().strip()
        env = dict(os.environ, HEADROOM_ENGINE_WORKER=sock)
        rp = os.path.join(a.out, "l8b-worker.request.json")
        json.dump(speed, open(rp, "w"))
        for full in (False, True, False, True):
            tl = os.path.join(a.out, "l8b-worker.json")
            t0 = time.time()
            p = subprocess.run(["taskset", "-c", "0,1", sys.executable, traced.ENGINE, "--request", rp, "--trace",
                                "--timeline", tl] + ([] if full else ["--trace-by-depth"]),
                               capture_output=True, text=True, timeout=300, env=env)
            r = {"name": "l8b-lora-b4s2048 via the warm worker (2 cores)", "full": full, "rc": p.returncode,
                 "s": round(time.time() - t0, 2), "ready": ready[:200], "err": p.stderr[-300:]}
            if p.returncode == 0:
                x = json.load(open(tl))
                r["timing"], r["depth"], r["worker"] = x.get("timing"), x["engine_info"].get("depth"), x["engine_info"].get("worker")
                r["peaks"] = peaks(x)
                os.remove(tl)
            print(json.dumps(r), flush=True)
            res.write(json.dumps(r) + "\n"); res.flush()
        w.terminate()
    with ThreadPoolExecutor(6) as pool:
        for name, ex, full in pool.map(one, enumerate(cases)):
            r = judge(name, ex, full)
            print(json.dumps(r), flush=True)
            res.write(json.dumps(r) + "\n"); res.flush()


if __name__ == "__main__":
    main()
