#!/usr/bin/env python3
"""The cases of lab/traced.sh: small configurations of each model type, built from the type's
own defaults in the installed Transformers with the sizes below put over them."""
import argparse, json, os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "probes", "headroom_engine.py")

# Sizes put over a type's defaults, where the type has the field.
SMALL = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
         "head_dim": 64, "intermediate_size": 2816, "vocab_size": 32000, "max_position_embeddings": 4096,
         "moe_intermediate_size": 512, "shared_expert_intermediate_size": 1024, "num_experts": 8,
         "num_local_experts": 8, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
         "first_k_dense_replace": 1, "kv_lora_rank": 128, "q_lora_rank": 256, "qk_rope_head_dim": 32,
         "qk_nope_head_dim": 64, "v_head_dim": 64, "num_kv_heads": 4, "linear_num_value_heads": 8,
         "linear_num_key_heads": 4, "sliding_window": 512, "tie_word_embeddings": False, "n_group": 1,
         "topk_group": 1}

TYPES = ["granite", "smollm3", "glm4", "cohere2", "olmoe", "phimoe", "gpt_oss", "falcon", "exaone4", "ernie4_5",
         "arcee", "phi", "stablelm", "qwen3_5", "qwen3_5_moe", "gemma4", "nemotron_h", "deepseek_v3", "llama", "qwen3_moe", "deepseek_v4"]


# SIZE=alt: a second, larger shape (measured after the rows and the trace were written).
ALT = {"hidden_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 16, "num_key_value_heads": 8,
       "head_dim": 128, "intermediate_size": 5632, "vocab_size": 49152, "max_position_embeddings": 8192,
       "moe_intermediate_size": 768, "shared_expert_intermediate_size": 1536, "num_experts": 16,
       "num_local_experts": 16, "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1,
       "first_k_dense_replace": 1, "kv_lora_rank": 256, "q_lora_rank": 512, "qk_rope_head_dim": 64,
       "qk_nope_head_dim": 128, "v_head_dim": 128, "num_kv_heads": 8, "linear_num_value_heads": 16,
       "linear_num_key_heads": 8, "sliding_window": 1024, "tie_word_embeddings": True, "n_group": 1,
       "topk_group": 1}


def small_config(model_type):
    from transformers import AutoConfig
    sizes = ALT if os.environ.get("SIZE") == "alt" else SMALL
    cfg = AutoConfig.for_model(model_type)
    d = cfg.to_dict()
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else None
    target = text if text is not None else d
    layers0 = target.get("num_hidden_layers")
    for k, v in sizes.items():
        if k in target and target[k] is not None and not isinstance(target[k], (list, dict)):
            target[k] = v
    n = target.get("num_hidden_layers", 4)
    # Every per-layer list or pattern (layer_types, no_rope_layers, hybrid_override_pattern, ...):
    # cut to the new depth, named or not.
    for k, v in list(target.items()):
        if k in ("layer_types", "mlp_only_layers", "hybrid_override_pattern", "layers_block_type") or (
                isinstance(v, (list, str)) and layers0 and len(v) == layers0 and k != "model_type"):
            if isinstance(v, (list, str)):
                target[k] = v[:n]
    # Per-layer settings keyed by layer index (gemma4's per_layer_config): only the kept layers.
    for k, v in list(target.items()):
        if isinstance(v, dict) and v and all(str(i).isdigit() for i in v):
            target[k] = {i: x for i, x in v.items() if int(i) < n}
    # Token ids of the full vocabulary (smollm3's and glm4's pad_token_id) past the small one.
    vocab = target.get("vocab_size") or 0
    for k, v in list(target.items()):
        if k.endswith("_token_id") and isinstance(v, int) and v >= vocab:
            target[k] = 0
        elif k.endswith("_token_id") and isinstance(v, list):
            target[k] = [x if not isinstance(x, int) or x < vocab else 0 for x in v]
    # MLA: the rotary tables are qk_rope_head_dim wide, and Transformers takes them from head_dim;
    # every head has its own k and v.
    if "qk_rope_head_dim" in target and "head_dim" in target:
        target["head_dim"] = target["qk_rope_head_dim"]
    if "kv_lora_rank" in target and "num_key_value_heads" in target:
        target["num_key_value_heads"] = target.get("num_attention_heads")
    if text is not None:
        d = dict(text)
    d["model_type"] = d.get("model_type", model_type)
    for k in ("architectures", "auto_map", "transformers_version", "_name_or_path", "torch_dtype", "dtype"):
        d.pop(k, None)
    return d


ATTENTION = {"gpt_oss": "eager"}  # Transformers 5.17 refuses sdpa for these


# LoRA targets where PEFT's all-linear does not run: Mamba's out_proj and conv1d are refused, and
# phimoe's router (a Linear returning a tuple) breaks PEFT's forward.
LORA_TARGETS = {"nemotron_h": ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "up_proj", "down_proj"],
                "phimoe": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def request(model_type, hf, train):
    c = {"attention": ATTENTION.get(model_type, "sdpa"), "precision": "bf16", "optimizer": "adamw", "optimizer_impl": "foreach", "finetune": "full",
         "micro_batch": 2, "seq_len": 1024, "grad_accum": 1, "grad_checkpointing": False,
         "lora": {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": LORA_TARGETS.get(model_type, ["all-linear"])}}
    c.update(train)
    return {"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda",
            "model": {"headroom": {"id": model_type, "name": model_type}, "config": hf}, "config": c}


def sh(args, env=None, timeout=300):
    t0 = time.time()
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, time.time() - t0, p.stderr[-12000:]
    except subprocess.TimeoutExpired:
        return -9, time.time() - t0, "timeout"


def case(out, name, req, nogpu_only=False, prefix=()):
    rp = os.path.join(out, name + ".request.json")
    json.dump(req, open(rp, "w"))
    rec = {"name": name}
    # The trace needs the GPU visible (the autograd engine asks for the device; nothing is allocated
    # on it beyond a context), and runs alongside the real step.
    pool = ThreadPoolExecutor(2)
    f3 = pool.submit(sh, list(prefix) + [sys.executable, ENGINE, "--request", rp, "--trace", "--timeline",
                          os.path.join(out, name + ".trace-tl.json")], None)
    e1 = e2 = ""
    if not nogpu_only:  # the real step alongside: the trace uses no GPU
        rec["real_rc"], rec["real_s"], e1 = sh([sys.executable, ENGINE, "--request", rp, "--no-attribution", "--timeline",
                                                os.path.join(out, name + ".real-tl.json"), "--out",
                                                os.path.join(out, name + ".real.json")])
    rec["trace_rc"], rec["trace_s"], e3 = f3.result()
    pool.shutdown()
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.write("== real\n" + e1 + "\n== trace\n" + e3 + "\n")
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only")
    ap.add_argument("--deadline-s", type=float, default=500)
    # Real steps side by side: each process reads its own allocator's counters, which others on
    # the same card do not touch (only the device total is shared, and it is not compared here).
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    t_end = time.time() + a.deadline_s
    cases = []
    for t in TYPES:
        try:
            hf = small_config(t)
        except Exception as e:
            print(f"{t}: no config ({type(e).__name__}: {str(e)[:200]})", flush=True)
            continue
        if os.environ.get("SIZE") == "alt":  # other batches and sequences too
            cases.append((f"{t}-alt-full", request(t, hf, {"micro_batch": 1, "seq_len": 4096})))
            if os.environ.get("LORA", "1") == "1":
                cases.append((f"{t}-alt-lora", request(t, hf, {"finetune": "lora", "micro_batch": 2, "seq_len": 2048})))
            if os.environ.get("CKPT", "1") == "1":
                cases.append((f"{t}-alt-ckpt", request(t, hf, {"grad_checkpointing": True, "micro_batch": 2, "seq_len": 2048})))
            continue
        cases.append((f"{t}-full", request(t, hf, {})))
        if os.environ.get("LORA", "1") == "1":
            cases.append((f"{t}-lora", request(t, hf, {"finetune": "lora", "micro_batch": 4, "seq_len": 2048})))
        if os.environ.get("CKPT", "1") == "1":
            cases.append((f"{t}-ckpt", request(t, hf, {"grad_checkpointing": True, "micro_batch": 4})))
    if a.only:  # names (granite-lora) or whole types (granite)
        keep = set(a.only.split(","))
        cases = [c for c in cases if c[0] in keep or c[0].split("-", 1)[0] in keep]
    l8b = json.load(open(os.path.join(ROOT, "resources", "models", "llama-3.1-8b.json")))
    speed = {"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "model": l8b,
             "config": request("llama", {}, {"finetune": "lora", "micro_batch": 4, "seq_len": 2048,
                                             "lora": {"rank": 16, "alpha": 32, "dropout": 0.0,
                                                      "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}})["config"]}
    res = open(os.path.join(a.out, "cases.jsonl"), "a")
    runs = [(name, req, False) for name, req in cases]

    def one(item):
        name, req, trace_only = item
        if time.time() > t_end:
            return {"name": name, "skipped": "deadline"}
        return case(a.out, name, req, nogpu_only=trace_only)

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for r in pool.map(one, runs):
            print(json.dumps(r), flush=True)
            res.write(json.dumps(r) + "\n"); res.flush()
    # The 8B trace's time, alone on the machine once the cases are done; SPEED_CPUS=0,1 pins it to
    # two cores (taskset), as on the 2-core development machine the issue names.
    cpus = os.environ.get("SPEED_CPUS")
    for i in range(int(os.environ.get("SPEED_RUNS", "3"))):
        r = case(a.out, f"speed-l8b-lora-b4s2048-{i}", speed, nogpu_only=True,
                 prefix=["taskset", "-c", cpus] if cpus else [])
        r["cpus"] = cpus or "all"
        print(json.dumps(r), flush=True)
        res.write(json.dumps(r) + "\n"); res.flush()


if __name__ == "__main__":
    main()
