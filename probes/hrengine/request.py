"""The request: read bounded, every field checked, one-line errors naming the field (BadRequest).
No torch."""
import json
import sys

from .protocol import BadRequest, MAX_DEPTH, MAX_REQUEST_BYTES, SCHEMA_VERSION, short
from .vision import parse_vision
from .vocabulary import ATTENTIONS, FINETUNES, IMPLS, LOSSES, MODES, OPTIMIZERS, PRECISIONS, REFERENCES


def _depth_ok(obj, depth=0):
    if depth > MAX_DEPTH:
        return False
    if isinstance(obj, dict):
        return all(_depth_ok(v, depth + 1) for v in obj.values())
    if isinstance(obj, list):
        return all(_depth_ok(v, depth + 1) for v in obj)
    return True


def read_request(path):
    try:
        if path in (None, "-"):
            text = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        else:
            with open(path, "rb") as f:
                text = f.read(MAX_REQUEST_BYTES + 1)
    except OSError as e:
        raise BadRequest("--request", path, f"cannot read the file ({e.strerror})")
    if len(text) > MAX_REQUEST_BYTES:
        raise BadRequest("request", f"{len(text)} bytes", f"too large (the limit is {MAX_REQUEST_BYTES} bytes)")
    try:
        req = json.loads(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BadRequest("request", f"({len(text)} bytes)", f"not valid JSON ({short(str(e))})")
    if not _depth_ok(req):
        raise BadRequest("request", "nesting", f"nested deeper than {MAX_DEPTH} levels")
    return req


def _int(obj, key, ctx, lo, hi, default=None):
    if key not in obj or obj[key] is None:
        if default is None:
            raise BadRequest(f"{ctx}.{key}", "(missing)", "required field is missing")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{ctx}.{key}", v, "must be a whole number")
    if v < lo or v > hi:
        raise BadRequest(f"{ctx}.{key}", v, f"must be between {lo} and {hi}")
    return v


def _choice(obj, key, ctx, choices, default=None):
    if key not in obj:
        if default is None:
            raise BadRequest(f"{ctx}.{key}", "(missing)", "required field is missing")
        return default
    v = obj[key]
    if not isinstance(v, str) or v not in choices:
        raise BadRequest(f"{ctx}.{key}", v, f"unknown value (accepted: {', '.join(choices)})")
    return v


def _bool(obj, key, ctx, default):
    if key not in obj or obj[key] is None:
        return default
    if not isinstance(obj[key], bool):
        raise BadRequest(f"{ctx}.{key}", obj[key], "must be true or false")
    return obj[key]


def _number(obj, key, ctx, lo, hi, default):
    if key not in obj:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
        raise BadRequest(f"{ctx}.{key}", v, f"must be a number in [{lo}, {hi}]")
    return float(v)


def parse_config(c):
    ctx = "config"
    if not isinstance(c, dict):
        raise BadRequest(ctx, c, "must be a JSON object")
    cfg = {
        "precision": _choice(c, "precision", ctx, PRECISIONS),
        "optimizer": _choice(c, "optimizer", ctx, OPTIMIZERS),
        "optimizer_impl": _choice(c, "optimizer_impl", ctx, IMPLS, "foreach"),
        "finetune": _choice(c, "finetune", ctx, FINETUNES),
        "micro_batch": _int(c, "micro_batch", ctx, 1, 1 << 20),
        "seq_len": _int(c, "seq_len", ctx, 1, 1 << 24),
        "grad_accum": _int(c, "grad_accum", ctx, 1, 1 << 16, 1),  # core's kMaxGradAccum
        "grad_checkpointing": _bool(c, "grad_checkpointing", ctx, False),
        "checkpoint_layers": _int(c, "checkpoint_layers", ctx, 0, 1 << 20, 0),
        "checkpoint_every": _int(c, "checkpoint_every", ctx, 0, 1 << 20, 0),
        "attention": _choice(c, "attention", ctx, ATTENTIONS, "sdpa"),
        "loss": _choice(c, "loss", ctx, LOSSES, "standard"),
        "world_size": _int(c, "world_size", ctx, 1, 1 << 16, 1),
        "zero_stage": _int(c, "zero_stage", ctx, 0, 3, 0),
        "offload_optimizer": _bool(c, "offload_optimizer", ctx, False),
        "activation_offload": _bool(c, "activation_offload", ctx, False),
    }
    lora = c.get("lora", {})
    if not isinstance(lora, dict):
        raise BadRequest("config.lora", lora, "must be a JSON object")
    targets = lora.get("targets", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    if not isinstance(targets, list) or not all(isinstance(t, str) and 0 < len(t) <= 200 for t in targets) \
            or len(targets) > 256:
        raise BadRequest("config.lora.targets", targets, "must be an array of module names")
    cfg["lora"] = {
        "rank": _int(lora, "rank", "config.lora", 1, 1 << 16, 16),
        "alpha": _number(lora, "alpha", "config.lora", 0.0, 1e9, 32.0),
        "dropout": _number(lora, "dropout", "config.lora", 0.0, 0.999999, 0.0),
        "targets": targets,
        "double_quant": _bool(lora, "double_quant", "config.lora", True),
    }
    if cfg["finetune"] != "full" and not targets:
        raise BadRequest("config.lora.targets", "[]", "LoRA needs at least one target module")
    if cfg["finetune"] == "qlora" and cfg["precision"] == "fp32":
        raise BadRequest("config.precision", "fp32", "QLoRA computes in 16 bits: use bf16, fp16 or amp-bf16")
    # Issue 29: the training mode, and the preference modes' block under the mode's name: the
    # reference (DPO, KTO), the prompt's tokens (each sequence is prompt then completion), beta
    cfg["mode"] = _choice(c, "mode", ctx, MODES, "sft")
    m = cfg["mode"]
    if m in ("dpo", "kto", "orpo"):
        d = c.get(m, {})
        if not isinstance(d, dict):
            raise BadRequest(f"config.{m}", d, "must be a JSON object")
        default_ref = "none" if m == "orpo" else "copy" if cfg["finetune"] == "full" else "adapter"
        cfg[m] = {
            "reference": _choice(d, "reference", f"config.{m}", REFERENCES, default_ref),
            "prompt_len": _int(d, "prompt_len", f"config.{m}", 1, max(1, cfg["seq_len"] - 1), max(1, cfg["seq_len"] // 2)),
            "beta": _number(d, "beta", f"config.{m}", 0.0, 1e6, 0.1),
        }
        if m == "orpo" and cfg[m]["reference"] != "none":
            raise BadRequest("config.orpo.reference", cfg[m]["reference"], "ORPO has no reference model: use none")
        if m == "dpo":  # IPO, hinge, APO: DPOTrainer's other losses on the same log-probabilities
            cfg[m]["loss_type"] = _choice(d, "loss_type", "config.dpo", ("sigmoid", "ipo", "hinge", "robust", "apo_zero",
                                                                       "apo_down"), "sigmoid")
        if m == "orpo":  # CPO and SimPO: TRL's CPOTrainer runs ORPO's step (orpo.py)
            cfg[m]["trainer"] = _choice(d, "trainer", "config.orpo", ("orpo", "cpo"), "orpo")
            cfg[m]["cpo_alpha"] = _number(d, "cpo_alpha", "config.orpo", 0.0, 1e6, 1.0)
            cfg[m]["loss_type"] = _choice(d, "loss_type", "config.orpo", ("sigmoid", "hinge", "ipo", "simpo"), "sigmoid")
        if cfg[m]["reference"] == "adapter" and cfg["finetune"] == "full":
            raise BadRequest(f"config.{m}.reference", "adapter", "a disabled adapter needs LoRA or QLoRA: use copy or none")
    if m == "grpo":
        cfg["grpo"] = _grpo_block(c, cfg)
    if m != "sft" and cfg.get("loss") == "fused":
        raise BadRequest("config.loss", "fused", f"{m.upper()} with the fused loss (TRL's use_liger_kernel) is not "
                         "measured yet: use loss standard")
    if m in ("kto", "orpo", "reward") and cfg["finetune"] == "qlora":
        raise BadRequest("config.finetune", "qlora", f"a {m} step is measured with full fine-tuning or LoRA; "
                         "QLoRA is not yet")
    vision = parse_vision(c, cfg)  # issue 30; a text step's config has no vision key
    if vision is not None:
        cfg["vision"] = vision
    if cfg["offload_optimizer"]:
        raise BadRequest("config.offload_optimizer", True,
                         "the transformers engine keeps the optimizer on the device; offload is estimated, not measured")
    return cfg


def _grpo_block(c, cfg):
    """Issue 29: GRPO's block (grpo.py): the prompt's tokens (seq_len is prompt + completion),
    the completions per prompt, beta (0: no reference, TRL's default), the reference when beta > 0,
    the sampling temperature."""
    d = c.get("grpo", {})
    if not isinstance(d, dict):
        raise BadRequest("config.grpo", d, "must be a JSON object")
    if "vllm" in d:
        raise BadRequest("config.grpo.vllm", d["vllm"], "generation by vLLM (use_vllm) is not measured: the engine "
                         "runs TRL's use_vllm=False path (HF generate); vLLM's share is modelled by the estimate")
    s, rows = cfg["seq_len"], cfg["micro_batch"] * cfg["grad_accum"]
    g = {"prompt_len": _int(d, "prompt_len", "config.grpo", 1, max(1, s - 1), max(1, s // 2)),
         "num_generations": _int(d, "num_generations", "config.grpo", 1, 1 << 16, min(8, rows)),
         "beta": _number(d, "beta", "config.grpo", 0.0, 1e6, 0.0),
         "temperature": _number(d, "temperature", "config.grpo", 1e-6, 1e6, 1.0)}
    default_ref = "none" if g["beta"] == 0.0 else "copy" if cfg["finetune"] == "full" else "adapter"
    g["reference"] = _choice(d, "reference", "config.grpo", REFERENCES, default_ref)
    if (g["reference"] == "none") != (g["beta"] == 0.0):
        raise BadRequest("config.grpo.reference", g["reference"], "GRPO has a reference exactly when beta > 0 "
                         f"(beta = {g['beta']:g})")
    if g["reference"] == "adapter" and cfg["finetune"] == "full":
        raise BadRequest("config.grpo.reference", "adapter", "a disabled adapter needs LoRA or QLoRA: use copy")
    if rows % g["num_generations"]:
        raise BadRequest("config.grpo.num_generations", g["num_generations"],
                         f"must divide the generation batch (micro_batch x grad_accum = {rows})")
    if cfg["world_size"] > 1 or cfg["zero_stage"] > 0:
        raise BadRequest("config.world_size", cfg["world_size"], "a GRPO step is measured on one GPU")
    if cfg["grad_checkpointing"] and (cfg["checkpoint_layers"] or cfg["checkpoint_every"] > 1):
        raise BadRequest("config.checkpoint_layers", cfg["checkpoint_layers"] or cfg["checkpoint_every"],
                         "TRL turns checkpointing back on for every layer after generating: checkpoint all or none")
    return g


# Headroom's flat model form (toJson(ModelArch)) back to a config.json, for requests made
# without one. Only the families whose flat form says everything.
def hf_config_from_flat(m):
    t = m.get("model_type", "llama")
    if t == "gpt2":
        return {"model_type": "gpt2", "n_embd": m["hidden_size"], "n_layer": m["num_hidden_layers"],
                "n_head": m["num_attention_heads"], "n_inner": m["intermediate_size"],
                "vocab_size": m["vocab_size"], "n_positions": m.get("max_position_embeddings", 1024),
                "activation_function": m.get("activation", "gelu_new"),
                "tie_word_embeddings": m.get("tie_word_embeddings", True)}
    if t not in ("llama", "mistral", "qwen2", "qwen3"):
        raise BadRequest("model.config", "(missing)",
                         f"the transformers engine needs the model's config.json for model_type {short(t)}")
    cfg = {"model_type": t}
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings"):
        if k in m:
            cfg[k] = m[k]
    cfg["hidden_act"] = m.get("activation", "silu")
    if t == "llama":
        cfg["attention_bias"] = bool(m.get("qkv_bias", False))
        cfg["mlp_bias"] = bool(m.get("mlp_bias", False))
    return cfg


# config.json keys that are about files, loading or remote code rather than the architecture.
_DROP_KEYS = ("architectures", "auto_map", "quantization_config", "torch_dtype", "dtype", "transformers_version",
              "_name_or_path", "use_cache", "model_type")


def parse_request(req):
    if not isinstance(req, dict):
        raise BadRequest("request", req, "must be a JSON object")
    v = req.get("schema_version")
    if v != SCHEMA_VERSION:
        raise BadRequest("request.schema_version", "(missing)" if v is None else v,
                         f"unsupported (this engine reads {SCHEMA_VERSION})")
    model = req.get("model")
    if not isinstance(model, dict):
        raise BadRequest("request.model", "(missing)" if model is None else model, "must be a JSON object")
    if isinstance(model.get("config"), dict):
        hf = dict(model["config"])
        meta = model.get("headroom", {}) if isinstance(model.get("headroom"), dict) else {}
    else:
        hf = hf_config_from_flat(model)
        meta = {"id": model.get("id", ""), "name": model.get("name", "")}
    mt = hf.get("model_type")
    if not isinstance(mt, str) or not mt or len(mt) > 100:
        raise BadRequest("model.config.model_type", "(missing)" if mt is None else mt, "must name the model type")
    return {
        "model": model,
        "hf_config": hf,
        "model_type": mt,
        "model_id": str(meta.get("id", "") or meta.get("name", "") or mt)[:200],
        "config": parse_config(req.get("config")),
        "steps": _int(req, "steps", "request", 1, 1000, 2),
        "device": _choice(req, "device", "request", ("auto", "cuda", "cpu"), "auto"),
    }
