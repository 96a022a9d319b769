#!/usr/bin/env python3
"""Diff the estimator's allocation stream against the transformers engine's, allocation by allocation.

    scripts/timeline_diff.py NAME [--cli build/dev/app/headroom-cli] [--phase forward] [--context 8] [--step 1]

NAME is a corpus configuration (tests/data/corpus/h200.jsonl) whose engine run recorded its
allocations (tests/data/corpus/h200-timelines.tar.xz), or the path of a result X.real.json with its
recorded stream X.real-tl.json beside it (tests/data/h200/traced-2026-12-03/real.tar.xz unpacked). Both streams are cut to step 1 (the first
steady step; --step 0 for the first, where the cache's layout is laid down); the script prints the phase peaks side by side and, for each phase, the first places
where the sequences of allocation sizes part, with the frame (engine) and op (estimate) of each.
A development tool: how a model family is matched op by op (README, contributor notes).
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus_entry(name):
    with open(os.path.join(ROOT, "tests/data/corpus/h200.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d["name"] == name:
                return d
    sys.exit(f"timeline_diff: name: {name!r} is not in the corpus")


def measured_timeline(name):
    with tarfile.open(os.path.join(ROOT, "tests/data/corpus/h200-timelines.tar.xz")) as t:
        try:
            return json.load(t.extractfile(name + ".json"))
        except KeyError:
            sys.exit(f"timeline_diff: name: {name!r} has no recorded timeline")


def cli_flags(cfg):
    f = ["--precision", cfg["precision"], "--optimizer", cfg["optimizer"], "--optimizer-impl",
         cfg.get("optimizer_impl", "foreach"), "--finetune", cfg["finetune"], "--batch", str(cfg["micro_batch"]),
         "--seq", str(cfg["seq_len"]), "--grad-accum", str(cfg.get("grad_accum", 1)), "--attention",
         cfg.get("attention", "sdpa"), "--gpus", str(cfg.get("world_size", 1)), "--zero", str(cfg.get("zero_stage", 0))]
    if cfg.get("grad_checkpointing"):
        f.append("--grad-checkpointing")
    if cfg.get("checkpoint_layers"):
        f += ["--checkpoint-layers", str(cfg["checkpoint_layers"])]
    if cfg.get("checkpoint_every"):
        f += ["--checkpoint-every", str(cfg["checkpoint_every"])]
    if cfg.get("activation_offload"):
        f.append("--activation-offload")
    if cfg.get("offload_optimizer"):
        f.append("--offload-optimizer")
    if cfg.get("finetune") == "qlora" and not cfg.get("lora", {}).get("double_quant", True):
        f.append("--no-double-quant")
    if cfg.get("loss"):
        f += ["--loss", cfg["loss"]]
    v = cfg.get("vision")
    if v:  # issue 30: the sample's pixels and what trains
        for key, flag in (("images", "--images"), ("max_pixels", "--max-pixels"), ("min_pixels", "--min-pixels"),
                          ("videos", "--videos"), ("video_frames", "--video-frames"),
                          ("video_max_pixels", "--video-max-pixels"), ("video_min_pixels", "--video-min-pixels")):
            if v.get(key):
                f += [flag, str(v[key])]
        for key, flag in (("image_size", "--image-size"), ("video_size", "--video-size")):
            if v.get(key):
                f += [flag, "x".join(str(x) for x in v[key])]
        for key, flag in (("train_vision_tower", "--train-vision-tower"), ("train_projector", "--train-projector")):
            if v.get(key):
                f.append(flag)
        if v.get("train_language_model") is False:
            f.append("--freeze-language-model")
    mode = cfg.get("mode", "sft")
    if mode != "sft":
        f += ["--mode", mode]
        block = cfg.get(mode, {})
        if "reference" in block and mode != "orpo":
            f += ["--dpo-reference", block["reference"]]
        if "prompt_len" in block:
            f += ["--prompt-len", str(block["prompt_len"])]
        if "beta" in block:
            f += ["--dpo-beta", str(block["beta"])]
        if "num_generations" in block:  # GRPO
            f += ["--num-generations", str(block["num_generations"])]
    if cfg["finetune"] != "full":
        lo = cfg["lora"]
        f += ["--lora-rank", str(lo["rank"]), "--lora-alpha", str(lo["alpha"]), "--lora-dropout", str(lo["dropout"]),
              "--lora-targets", ",".join(lo["targets"])]
    return f


def estimated_timeline(cli, entry, alloc_conf):
    res = entry["result"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(res["model"]["config"], f)
        cmd = [cli, "timeline", "--model", path] + cli_flags(res["config"])
        if alloc_conf:
            cmd += ["--alloc-conf", alloc_conf]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("timeline_diff: " + p.stderr.strip())
        return json.loads(p.stdout)


def step_events(tl, step):
    """(phase, [(kind, size, label)]) for each phase of `step`, allocations and frees only."""
    marks = [m for m in tl["marks"] if m["phase"] != "after_load"]
    frames = tl.get("frames", [])
    ev = tl["events"]
    sizes = {}
    out = []
    bounds = []
    for i, m in enumerate(marks):
        if m["step"] == step:
            end = marks[i + 1]["event"] if i + 1 < len(marks) else len(ev)
            bounds.append((m["phase"], m["event"], end))
    # sizes of live ids from the start
    first = bounds[0][1] if bounds else len(ev)
    for e in ev[:first]:
        if e[0] == 0:
            sizes[e[1]] = e[2]
    for phase, a, b in bounds:
        seq = []
        for e in ev[a:b]:
            if e[0] == 0:
                sizes[e[1]] = e[2]
                label = frames[e[4]] if len(e) > 4 and e[4] < len(frames) else ""
                seq.append(("+", e[2], label))
            elif e[0] == 1:
                seq.append(("-", e[2] if len(e) > 2 else sizes.get(e[1], 0), ""))
        out.append((phase, seq))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/dev/app/headroom-cli"))
    ap.add_argument("--phase", default="")
    ap.add_argument("--context", type=int, default=6)
    ap.add_argument("--hunks", type=int, default=4)
    ap.add_argument("--step", type=int, default=1, help="the step compared (0: the first, 1: the first steady one)")
    ap.add_argument("--drift", action="store_true",
                    help="instead of hunks, print where the live bytes of the two streams start to differ")
    a = ap.parse_args()
    if a.name.endswith(".real.json"):
        with open(a.name) as f:
            entry = {"result": json.load(f)}
        with open(a.name[:-len(".real.json")] + ".real-tl.json") as f:
            meas = step_events(json.load(f), a.step)
        conf = None
    else:
        entry = corpus_entry(a.name)
        plan = json.load(open(os.path.join(ROOT, "lab/corpus-plan.json")))
        conf = next((j.get("alloc_conf") for j in plan["jobs"] if j["name"] == a.name), None)
        meas = step_events(measured_timeline(a.name), a.step)
    est = step_events(estimated_timeline(a.cli, entry, conf), a.step)
    for (phase, ms), (_, es) in zip(meas, est):
        if a.phase and phase != a.phase:
            continue

        def peak(seq):
            cur = top = 0
            for k, s, _ in seq:
                cur += s if k == "+" else -s
                top = max(top, cur)
            return top
        print(f"== {phase}: {len(ms)} engine events, {len(es)} estimated; rise to peak "
              f"{peak(ms) / 2**20:.1f} MiB engine, {peak(es) / 2**20:.1f} MiB estimated")
        mk = [(k, s) for k, s, _ in ms]
        ek = [(k, s) for k, s, _ in es]
        sm = difflib.SequenceMatcher(None, mk, ek, autojunk=False)
        if a.drift:
            live_m = live_e = last = 0
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                live_m += sum(s if k == "+" else -s for k, s, _ in ms[i1:i2])
                live_e += sum(s if k == "+" else -s for k, s, _ in es[j1:j2])
                if abs((live_e - live_m) - last) >= 1 << 20:
                    last = live_e - live_m
                    print(f"   estimate - engine {last / 2**20:+9.1f} MiB after engine[{i2}] "
                          f"{ms[i1][2][-50:] if i1 < len(ms) else ''} | estimate[{j2}] {es[j1][2] if j1 < len(es) else ''}")
            continue
        shown = 0
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            shown += 1
            if shown > a.hunks:
                print("   ...")
                break
            print(f"-- {tag} engine[{i1}:{i2}] estimate[{j1}:{j2}]")
            for i in range(max(0, i1 - a.context), min(len(ms), i2 + 2)):
                k, s, lab = ms[i]
                print(f"   E{i:6d} {k}{s:>14,d} {lab[-60:]}")
            for j in range(max(0, j1 - 2), min(len(es), j2 + 2)):
                k, s, lab = es[j]
                print(f"   S{j:6d} {k}{s:>14,d} {lab}")


if __name__ == "__main__":
    main()
