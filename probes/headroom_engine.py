#!/usr/bin/env python3
"""headroom_engine: the `transformers` engine of headroom-probe.

It runs the training stack users run -- PyTorch, Hugging Face Transformers and PEFT (and
bitsandbytes, FSDP2 or DeepSpeed where asked and installed) -- for one request, and reports
per-phase memory in headroom-probe's protocol (docs/probe-protocol.md; the JSON Schema is
resources/probe-protocol.schema.json): JSON lines on stdout, progress events, then one result.

    python3 headroom_engine.py --request FILE [--out FILE] [--steps N] [--device auto|cuda|cpu]
        [--snapshot FILE] [--timeline FILE] [--memory-cap-bytes N] [--model-factory FILE]
        [--rank-dir DIR] [--share-gpu] [--sharding fsdp|deepspeed]

headroom-probe --engine transformers starts it (with HEADROOM_PYTHON or Settings' interpreter),
and starts it under torchrun for several ranks. Exit codes are the probe's: 0 ok, 2 bad
request, 3 out of memory (a result is still printed), 4 a device or package is missing,
5 internal error, 128 + signal when stopped.

A training step here is HF Trainer's: for each micro-batch `loss = model(input_ids=ids,
labels=ids).loss / grad_accum; loss.backward()` (the output object, and so its logits, dropped
before backward), then `optimizer.step(); optimizer.zero_grad(set_to_none=True)`. One warm-up
step runs first (optimizer state appears at the first step()), then the measured steps, each
phase with the allocator's peak reset. Attribution comes from one extra, instrumented step, so
the measured steps run untouched.
"""
import argparse
import contextlib
import datetime
import gc
import json
import os
import re
import signal
import sys
import threading
import time

SCHEMA_VERSION = 1
EXIT_OK, EXIT_BAD_REQUEST, EXIT_OUT_OF_MEMORY, EXIT_NO_DEVICE, EXIT_INTERNAL = 0, 2, 3, 4, 5
PHASES = ("after_load", "forward", "backward", "optimizer")
CATEGORIES = ("weights", "gradients", "optimizer_state", "activations", "logits", "temporaries",
              "communication", "allocator_slack", "cuda_context")
PRECISIONS = ("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion")
IMPLS = ("foreach", "fused", "for-loop")
FINETUNES = ("full", "lora", "qlora")
ATTENTIONS = ("sdpa", "eager")
LOSSES = ("standard", "fused")
MAX_REQUEST_BYTES = 64 << 20
MAX_DEPTH = 64
VERSION = "0.2.0"


# ---------------------------------------------------------------- errors and signals
class BadRequest(Exception):
    def __init__(self, field, value, why):
        super().__init__(f"{field} = {short(value)}: {why}")
        self.field = field


class Missing(Exception):
    """A device or package the request needs is not there: exit 4."""


class Stopped(BaseException):
    """SIGTERM / SIGINT; a BaseException so that no library's `except Exception` swallows it."""


_stop = threading.Event()
_signal = [0]
_critical = [0]


def _on_signal(signum, _frame):
    _signal[0] = signum
    _stop.set()
    if not _critical[0]:
        raise Stopped()


def check_stop():
    if _stop.is_set():
        raise Stopped()


def short(v, n=80):
    """A value for a one-line message: control characters escaped, long values cut."""
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    s = s.encode("unicode_escape").decode("ascii", "replace")
    return s if len(s) <= n else s[: n - 3] + "..."


class Output:
    """JSON lines on stdout; a line is written whole, with SIGTERM held back meanwhile."""

    def __init__(self, quiet=False):
        self.quiet = quiet

    def emit(self, obj, force=False):
        if self.quiet and not force:
            return
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n"
        _critical[0] += 1
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        finally:
            _critical[0] -= 1


def write_atomically(path, obj, indent=1):
    tmp = f"{path}.tmp{os.getpid()}"
    _critical[0] += 1
    try:
        try:
            with open(tmp, "w") as f:
                json.dump(obj, f, indent=indent, allow_nan=False)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    finally:
        _critical[0] -= 1


# ---------------------------------------------------------------- the request
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
        "grad_accum": _int(c, "grad_accum", ctx, 1, 1 << 20, 1),
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
    if cfg["offload_optimizer"]:
        raise BadRequest("config.offload_optimizer", True,
                         "the transformers engine keeps the optimizer on the device; offload is estimated, not measured")
    return cfg


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


# ---------------------------------------------------------------- measuring
class CudaMeter:
    """The caching allocator's own statistics; device and process totals from CUDA and NVML."""

    cuda = True

    def __init__(self, torch):
        self.t = torch
        self.nvml = None
        try:
            import pynvml
            pynvml.nvmlInit()
            idx = torch.cuda.current_device()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            ids = [s for s in visible.split(",") if s.strip()]
            if ids and ids[idx].strip().isdigit():
                idx = int(ids[idx])
            self.nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(idx))
        except Exception:  # NVML is optional: cudaMemGetInfo still gives the device total
            self.nvml = None

    def sync(self):
        self.t.cuda.synchronize()

    def reset_peak(self):
        self.t.cuda.reset_peak_memory_stats()

    def allocated_now(self):
        return self.t.cuda.memory_allocated()

    def read(self):
        s = self.t.cuda.memory_stats()
        return {"allocated": s.get("allocated_bytes.all.current", 0), "allocated_peak": s.get("allocated_bytes.all.peak", 0),
                "reserved": s.get("reserved_bytes.all.current", 0), "reserved_peak": s.get("reserved_bytes.all.peak", 0),
                "retries": s.get("num_alloc_retries", 0), "ooms": s.get("num_ooms", 0)}

    def device_used_total(self):
        free, total = self.t.cuda.mem_get_info()
        return int(total - free), int(total)

    def process_used(self):
        """This process's device memory as nvidia-smi lists it (context + pool + libraries)."""
        if not self.nvml:
            return 0
        pynvml, h = self.nvml
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception:
            return 0
        me = os.getpid()
        return int(sum(p.usedGpuMemory or 0 for p in procs if p.pid == me))

    def driver(self):
        if self.nvml:
            try:
                d = self.nvml[0].nvmlSystemGetDriverVersion()
                return "NVIDIA driver " + (d.decode() if isinstance(d, bytes) else d)
            except Exception:
                pass
        return "CUDA " + str(self.t.version.cuda)

    def mark(self):
        return None

    def finish(self):
        pass


class CpuMeter:
    """On the CPU the bytes come from the profiler's record of every CPU allocator call
    (profile_memory), replayed in order; markers and samples are resolved afterwards."""

    cuda = False

    def __init__(self, torch):
        self.t = torch
        from torch.profiler import ProfilerActivity, profile
        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
        self.prof.__enter__()
        self.events = None
        self.times = None
        self.cum = None

    def sync(self):
        pass

    @staticmethod
    def now_us():
        return time.time_ns() // 1000

    def mark(self):
        return self.now_us()

    def finish(self):
        if self.events is not None:
            return
        self.prof.__exit__(None, None, None)
        evs = []
        kr = getattr(self.prof.profiler, "kineto_results", None)
        raw = kr.events() if kr is not None else []
        for i, e in enumerate(raw):
            if e.name() != "[memory]":
                continue
            if hasattr(e, "device_type") and str(e.device_type()).split(".")[-1].upper() != "CPU":
                continue
            t = e.start_ns() / 1000.0 if hasattr(e, "start_ns") else float(e.start_us())
            evs.append((t, i, int(e.nbytes())))
        evs.sort()
        self.times = [e[0] for e in evs]
        cum, total = [], 0
        for e in evs:
            total += e[2]
            cum.append(total)
        self.events, self.cum = evs, cum

    def _index(self, t_us):
        import bisect
        return bisect.bisect_right(self.times, t_us)

    def at(self, t_us):
        i = self._index(t_us)
        return self.cum[i - 1] if i > 0 else 0

    def window(self, t0, t1):
        """(allocated at t0, peak in [t0, t1], allocated at t1)"""
        i0, i1 = self._index(t0), self._index(t1)
        start = self.cum[i0 - 1] if i0 > 0 else 0
        peak = max([start] + self.cum[i0:i1])
        end = self.cum[i1 - 1] if i1 > 0 else 0
        return start, peak, end


def oom_requested_bytes(msg):
    m = re.search(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|B)", msg)
    if m:
        return int(float(m.group(1)) * {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}[m.group(2)])
    m = re.search(r"you tried to allocate (\d+) bytes", msg)
    return int(m.group(1)) if m else 0


def is_oom(torch, e):
    if isinstance(e, MemoryError):
        return True
    oom_cls = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_cls is not None and isinstance(e, oom_cls):
        return True
    s = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in s or "can't allocate memory" in s)


# ---------------------------------------------------------------- the model
def find_layers(model):
    """The decoder layers: the ModuleList named like HF's (`layers`, GPT-2's `h`, `blocks`), else
    the longest one (a ModuleList of experts inside a layer is not the layers)."""
    import torch.nn as nn
    named, longest = None, None
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0:
            continue
        if name.split(".")[-1] in ("layers", "h", "blocks") and (named is None or len(mod) > len(named)):
            named = mod
        if longest is None or len(mod) > len(longest):
            longest = mod
    best = named if named is not None else longest
    return list(best) if best is not None else []


def describe_parameters(model):
    """Every parameter class once (layer indices folded to *), for reading a model's layout."""
    seen = {}
    for name, p in model.named_parameters():
        key = re.sub(r"\.(\d+)\.", ".*.", name)
        e = seen.get(key)
        if e is None:
            seen[key] = {"name": key, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""),
                         "trainable": bool(p.requires_grad), "count": 1}
        else:
            e["count"] += 1
    layers = find_layers(model)
    modules = []
    if layers:
        modules = sorted({f"{n}:{type(m).__name__}" for n, m in layers[0].named_modules()})[:200]
    return {"parameters": list(seen.values())[:400], "layer0_modules": modules,
            "layer_class": type(layers[0]).__name__ if layers else None}


def load_factory(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("headroom_model_factory", path)
    if spec is None or spec.loader is None:
        raise BadRequest("--model-factory", path, "not a Python file")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except FileNotFoundError:
        raise BadRequest("--model-factory", path, "no such file")
    if not hasattr(mod, "build"):
        raise BadRequest("--model-factory", path, "defines no build(config, dtype, attn_implementation, device)")
    return mod


def require(module, purpose):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Missing(f"{purpose} needs the Python package '{module.split('.')[0]}', which this interpreter "
                      f"({sys.executable}) cannot import: {short(str(e), 120)}")


def apply_fused_loss(model, info):
    """--loss fused: Liger Kernel's FusedLinearCrossEntropy in the model's forward, and nothing
    else of Liger (its RoPE, RMSNorm and SwiGLU kernels change memory too, and are not asked for)."""
    liger = require("liger_kernel", "the fused loss (config.loss = fused)")
    info["liger_kernel"] = getattr(liger, "__version__", "unknown")
    from liger_kernel.transformers import _apply_liger_kernel_to_instance
    try:
        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=True, cross_entropy=False,
                                        rope=False, rms_norm=False, swiglu=False)
    except TypeError:  # a family whose patch takes other switches (geglu, layer_norm...)
        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=True, cross_entropy=False,
                                        rope=False, rms_norm=False)


def build_model(torch, R, device, factory, info):
    cfg = R["config"]
    prec = cfg["precision"]
    pdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "amp-bf16": torch.float32, "amp-fp16": torch.float32}[prec]
    if cfg["finetune"] == "qlora":
        pdtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(prec, pdtype)
    hf = {k: v for k, v in R["hf_config"].items() if k not in _DROP_KEYS}
    torch.manual_seed(0)
    if factory is not None:
        model = factory.build(dict(R["hf_config"]), pdtype, cfg["attention"], device)
        info["model_class"] = type(model).__name__
    else:
        transformers = require("transformers", "the transformers engine")
        info["transformers"] = transformers.__version__
        from transformers import AutoConfig, AutoModelForCausalLM
        try:
            config = AutoConfig.for_model(R["model_type"], **hf)
        except (ValueError, KeyError) as e:
            raise BadRequest("model.config.model_type", R["model_type"],
                             f"Transformers {transformers.__version__} cannot build it ({short(str(e), 160)})")
        except TypeError as e:
            raise BadRequest("model.config", R["model_type"], f"not a valid config ({short(str(e), 160)})")
        config.use_cache = False
        old = torch.get_default_dtype()
        torch.set_default_dtype(pdtype)
        try:
            ctx = torch.device(device) if hasattr(torch.device, "__enter__") else None
            if ctx is not None:
                ctx.__enter__()
            try:
                try:
                    model = AutoModelForCausalLM.from_config(config, dtype=pdtype,
                                                             attn_implementation=cfg["attention"])
                except TypeError:
                    model = AutoModelForCausalLM.from_config(config, torch_dtype=pdtype,
                                                             attn_implementation=cfg["attention"])
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
        finally:
            torch.set_default_dtype(old)
        model = model.to(device)
        info["model_class"] = type(model).__name__
        info["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    check_stop()
    if cfg["loss"] == "fused":
        apply_fused_loss(model, info)
    if cfg["finetune"] == "qlora":
        model = quantize_4bit(torch, model, cfg, info)
    if cfg["grad_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg["checkpoint_layers"] > 0:  # selective: only the first N decoder layers recompute
            for layer in find_layers(model)[cfg["checkpoint_layers"]:]:
                layer.gradient_checkpointing = False
            info["checkpoint_layers"] = cfg["checkpoint_layers"]
        if cfg["checkpoint_every"] > 1:  # selective: only layers 0, k, 2k, ... recompute
            for i, layer in enumerate(find_layers(model)):
                if i % cfg["checkpoint_every"]:
                    layer.gradient_checkpointing = False
            info["checkpoint_every"] = cfg["checkpoint_every"]
    if cfg["finetune"] in ("lora", "qlora"):
        peft = require("peft", "LoRA")
        info["peft"] = peft.__version__
        lc = peft.LoraConfig(r=cfg["lora"]["rank"], lora_alpha=cfg["lora"]["alpha"],
                             lora_dropout=cfg["lora"]["dropout"],
                             target_modules=(cfg["lora"]["targets"] if cfg["lora"]["targets"] != ["all-linear"]
                                             else "all-linear"),
                             task_type="CAUSAL_LM")
        try:
            model = peft.get_peft_model(model, lc)
        except ValueError as e:
            raise BadRequest("config.lora.targets", cfg["lora"]["targets"], f"PEFT refused them ({short(str(e), 160)})")
        info["lora_modules"] = sum(1 for n, _ in model.named_modules() if n.endswith(".lora_A"))
    model.train()
    return model


def quantize_4bit(torch, model, cfg, info):
    """QLoRA as users run it: the decoder's Linear layers in bitsandbytes NF4 (Linear4bit), then
    peft.prepare_model_for_kbit_training (which puts the other parameters in fp32)."""
    bnb = require("bitsandbytes", "QLoRA")
    peft = require("peft", "QLoRA")
    info["bitsandbytes"] = getattr(bnb, "__version__", "?")
    import torch.nn as nn
    compute = next(model.parameters()).dtype
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            if not isinstance(child, nn.Linear) or child is head:
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=compute, compress_statistics=cfg["lora"]["double_quant"],
                                  quant_type="nf4", device="cpu")
            q.weight = bnb.nn.Params4bit(child.weight.data.to("cpu"), requires_grad=False, quant_type="nf4",
                                         compress_statistics=cfg["lora"]["double_quant"])
            if child.bias is not None:
                q.bias = nn.Parameter(child.bias.data, requires_grad=False)
            setattr(mod, cname, q.to(child.weight.device))
            del child
    gc.collect()
    torch.cuda.empty_cache()
    model.is_loaded_in_4bit = True
    return peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg["grad_checkpointing"],
                                                gradient_checkpointing_kwargs={"use_reentrant": False})


def build_optimizer(torch, cfg, params, info, zero1=False):
    opt, impl = cfg["optimizer"], cfg["optimizer_impl"]
    lr = 1e-5
    if opt in ("adamw", "sgd", "sgd-momentum"):
        cls = torch.optim.AdamW if opt == "adamw" else torch.optim.SGD
        kw = {"lr": lr}
        if opt == "sgd-momentum":
            kw["momentum"] = 0.9
        if impl == "fused":
            kw["fused"] = True
        else:
            kw["foreach"] = impl == "foreach"
    elif opt == "adafactor":
        # What HF Trainer builds for optim="adafactor": transformers.optimization.Adafactor with
        # scale_parameter=False, relative_step=False and the learning rate; beta1 stays None.
        transformers = require("transformers", "Adafactor")
        cls = transformers.optimization.Adafactor
        kw = {"lr": lr, "scale_parameter": False, "relative_step": False}
    elif opt in ("adamw-8bit", "paged-adamw-8bit", "lion"):
        bnb = require("bitsandbytes", f"--optimizer {opt}")
        info["bitsandbytes"] = getattr(bnb, "__version__", "?")
        cls = {"adamw-8bit": bnb.optim.AdamW8bit, "paged-adamw-8bit": bnb.optim.PagedAdamW8bit,
               "lion": bnb.optim.Lion}[opt]
        kw = {"lr": lr}
    else:
        raise BadRequest("config.optimizer", opt, "not available in the transformers engine")
    info["optimizer_class"] = f"{cls.__module__}.{cls.__name__}"
    try:
        if zero1:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
        return cls(params, **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        if impl == "fused":
            raise BadRequest("config.optimizer_impl", impl, f"{cls.__name__} refused it here ({short(str(e), 120)})")
        raise


def state_tensors(opt):
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local optimizer in .optim
    for st in inner.state.values():
        for v in st.values():
            if hasattr(v, "data_ptr") and hasattr(v, "is_cuda"):
                yield v


def storage_key(t):
    try:
        return t.untyped_storage().data_ptr()
    except AttributeError:  # torch 1.13
        return t.storage().data_ptr()


def storage_bytes(t):
    try:
        return t.untyped_storage().nbytes()
    except AttributeError:
        return t.storage().nbytes()


# ---------------------------------------------------------------- several ranks
class Dist:
    def __init__(self, torch, args, cfg):
        self.t = torch
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        self.enabled = self.world > 1 or "RANK" in os.environ
        self.share = args.share_gpu
        self.sharding = args.sharding
        self.backend = None
        self.zero = cfg["zero_stage"]
        self.ddp = self.enabled and self.zero == 0

    def device_index(self):
        return 0 if self.share else self.local

    def init(self, cuda):
        if not self.enabled:
            return
        import torch.distributed as dist
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        self.backend = "nccl" if cuda and not self.share else "gloo"
        kw = {"backend": self.backend}
        if cuda and self.backend == "nccl":
            kw["device_id"] = self.t.device("cuda", self.device_index())
        try:
            dist.init_process_group(**kw)
        except TypeError:
            kw.pop("device_id", None)
            dist.init_process_group(**kw)

    def close(self):
        if self.enabled:
            import torch.distributed as dist
            if dist.is_initialized():
                try:
                    dist.destroy_process_group()
                except Exception:
                    pass


@contextlib.contextmanager
def in_place_init_sync(torch):
    """CPU mode only. DDP's constructor checks the parameter shapes and broadcasts rank 0's
    parameters through flat temporaries (dist._verify_params_across_processes,
    dist._broadcast_coalesced). Whichever thread drops the last reference frees them: the main
    thread or one of Gloo's workers, a race. The profiler does not follow Gloo's threads, so a free
    there is never recorded and that rank's bytes stay too high for the rest of the run (by the
    model's size: a rank spread of 1.11 on the tiny test model). Here the same broadcast is made
    tensor by tensor, in place, into tensors the module keeps, and the shape check (every rank
    builds the same model from the same request) is skipped. On CUDA the allocator's own counters
    see every thread, and DDP runs unchanged."""
    import torch.distributed as dist
    saved = {n: getattr(dist, n, None) for n in ("_broadcast_coalesced", "_verify_params_across_processes")}

    def broadcast(group, tensors, buffer_size, src):
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t, src, group=group)

    dist._broadcast_coalesced = broadcast
    dist._verify_params_across_processes = lambda *a, **k: None
    try:
        yield
    finally:
        for n, f in saved.items():
            if f is None:
                delattr(dist, n)
            else:
                setattr(dist, n, f)


def wrap_parallel(torch, model, R, D, cuda, info):
    """DDP (ZeRO-0), DDP + ZeroRedundancyOptimizer (ZeRO-1), FSDP2 fully_shard (ZeRO-2: reshard
    after forward off; ZeRO-3: on), or DeepSpeed when --sharding deepspeed."""
    cfg = R["config"]
    if not D.enabled:
        return model, "none"
    if D.sharding == "deepspeed":
        require("deepspeed", "--sharding deepspeed")
        return model, "deepspeed"
    if D.zero <= 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        kw = {"device_ids": [D.device_index()]} if cuda else {}
        info["sharding"] = "ddp" if D.zero == 0 else "ddp+zero_redundancy_optimizer"
        with (contextlib.nullcontext() if cuda else in_place_init_sync(torch)):
            return DDP(model, **kw), info["sharding"]
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except Exception as e:  # ImportError, or 1.13's dataclass error on Python 3.11
        raise Missing(f"ZeRO-2/3 need FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch >= 2.6; this is "
                      f"{torch.__version__}): {short(str(e), 100)}")
    mp = {}
    if cfg["precision"] in ("amp-bf16", "amp-fp16"):
        low = torch.bfloat16 if cfg["precision"] == "amp-bf16" else torch.float16
        mp["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    reshard = D.zero == 3
    for layer in find_layers(model):
        fully_shard(layer, reshard_after_forward=reshard, **mp)
    fully_shard(model, reshard_after_forward=reshard, **mp)
    info["sharding"] = f"fsdp2(reshard_after_forward={reshard})"
    return model, info["sharding"]


def parameters_sum(torch, model, D):
    total = 0.0
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad:
                continue
            local = p.to_local() if hasattr(p, "to_local") else p
            total += float(local.double().sum())
    if D.enabled and D.zero >= 2:
        import torch.distributed as dist
        t = torch.tensor([total], dtype=torch.float64, device="cpu" if D.backend == "gloo" else "cuda")
        dist.all_reduce(t)
        total = float(t[0])
    return total


# ---------------------------------------------------------------- attribution
class Attributor:
    """One instrumented step: samples at every saved tensor (pack and unpack hooks), every
    gradient accumulation and every decoder layer; at the sample with the most bytes allocated,
    bytes are put in categories by tensor identity: weights are the parameters, gradients their
    .grad, optimizer state the optimizer's tensors, activations the tensors autograd saved,
    logits the lm_head's output and vocabulary-sized saved tensors; temporaries are the rest.
    Running totals keep a sample O(1)."""

    def __init__(self, torch, model, opt, meter, vocab):
        self.t, self.model, self.opt, self.meter, self.vocab = torch, model, opt, meter, vocab
        self.params = set()
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.numel():
                self.params.add(storage_key(local))
        self.state = sum(storage_bytes(v) for v in state_tensors(opt))
        self.saved = {}  # storage -> [bytes, holders, is_logits]
        self.acts = 0
        self.logits_saved = 0
        self.live_logits = {}
        self.grad_seen = set()
        self.grads = self.scan_grads()
        self.best = None
        self.samples = []
        self.phase = "forward"  # set by attribute(): every sample also counts for its phase
        self.best_by_phase = {}
        self.lock = threading.Lock()

    def scan_grads(self):
        n = 0
        for p in self.model.parameters():
            g = p.grad
            if g is not None:
                g = g.to_local() if hasattr(g, "to_local") else g
                n += storage_bytes(g)
                self.grad_seen.add(id(p))
        return n

    def on_grad(self, p):
        if id(p) not in self.grad_seen and p.grad is not None:
            self.grad_seen.add(id(p))
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            self.grads += storage_bytes(g)
        self.sample()

    def rescan(self):
        self.grad_seen.clear()
        self.grads = self.scan_grads()
        self.sample()

    def sample(self):
        with self.lock:
            cats = {"gradients": self.grads, "activations": self.acts,
                    "logits": self.logits_saved + sum(self.live_logits.values())}
            if self.meter.cuda:
                now = self.meter.allocated_now()
                if self.best is None or now > self.best[0]:
                    self.best = (now, cats)
                b = self.best_by_phase.get(self.phase)
                if b is None or now > b[0]:
                    self.best_by_phase[self.phase] = (now, cats)
            else:
                self.samples.append((self.meter.mark(), cats, self.phase))

    def pack(self, t):
        try:
            k = storage_key(t)
        except Exception:
            return t
        with self.lock:
            if k in self.params:
                return t.detach()
            e = self.saved.get(k)
            if e is None:
                lg = t.dim() > 0 and t.shape[-1] == self.vocab
                e = self.saved[k] = [storage_bytes(t), 0, lg]
                if lg:
                    self.logits_saved += e[0]
                else:
                    self.acts += e[0]
            e[1] += 1
        holder = _Holder(t.detach(), k, self)
        self.sample()
        return holder

    def unpack(self, h):
        if isinstance(h, _Holder):
            self.sample()
            return h.t
        return h

    def release(self, k):
        with self.lock:
            e = self.saved.get(k)
            if e is not None:
                e[1] -= 1
                if e[1] <= 0:
                    del self.saved[k]
                    if e[2]:
                        self.logits_saved -= e[0]
                    else:
                        self.acts -= e[0]

    def on_logits(self, _mod, _inp, out):
        t = out[0] if isinstance(out, tuple) else out
        if not hasattr(t, "data_ptr"):
            return
        k = storage_key(t)
        self.live_logits[k] = storage_bytes(t)
        import weakref
        weakref.finalize(t, self.live_logits.pop, k, None)
        self.sample()

    def result(self, peak_allocated, weights_bytes, phase=None):
        """Bytes by category at the step's peak (phase None), or at a phase's peak: the sample
        with the most allocated in it; temporaries are the rest of `peak_allocated`."""
        if self.meter.cuda:
            best = self.best if phase is None else self.best_by_phase.get(phase)
            if best is None:
                return None
            cats = best[1]
        else:
            samples = [s for s in self.samples if phase is None or s[2] == phase]
            if not samples:
                return None
            self.meter.finish()
            cats = max(samples, key=lambda kc: self.meter.at(kc[0]))[1]
        a = {c: 0 for c in CATEGORIES}
        a["weights"] = weights_bytes
        a["optimizer_state"] = self.state
        a.update(cats)
        named = sum(a[c] for c in ("weights", "gradients", "optimizer_state", "activations", "logits"))
        a["temporaries"] = max(0, peak_allocated - named)
        return {k: int(v) for k, v in a.items()}


class _Holder:
    __slots__ = ("t", "k", "a", "__weakref__")

    def __init__(self, t, k, a):
        self.t, self.k, self.a = t, k, a

    def __del__(self):
        try:
            self.a.release(self.k)
        except Exception:
            pass


# ---------------------------------------------------------------- the allocator's trace
class Recorder:
    """torch.cuda.memory._record_memory_history for --timeline and --snapshot: every block the
    caching allocator hands out or takes back, replayed into a timeline of the run and the
    live blocks at the last step's peak."""

    def __init__(self, torch):
        self.t = torch
        self.on = False
        self.marks = []  # (label dict, time_us, allocated at that moment)

    def start(self):
        try:
            self.t.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                      max_entries=4_000_000)
            self.on = True
        except Exception as e:  # older PyTorch
            print(f"headroom_engine: no allocator trace ({e})", file=sys.stderr)

    def mark(self, label, allocated):
        if self.on:
            self.marks.append((label, time.time_ns() // 1000, allocated))

    def stop(self):
        if not self.on:
            return None
        snap = self.t.cuda.memory._snapshot()
        self.t.cuda.memory._record_memory_history(enabled=None)
        self.on = False
        traces = snap.get("device_traces") or [[]]
        dev = self.t.cuda.current_device()
        return traces[dev] if dev < len(traces) else traces[0]


_FRAME_KEEP = ("transformers/", "peft/", "torch/optim", "torch/nn/functional", "torch/nn/modules",
               "torch/utils/checkpoint", "torch/distributed", "bitsandbytes/", "headroom_engine", "tinylm")


def frame_of(frames):
    for f in frames or []:
        fn = f.get("filename", "")
        if any(k in fn for k in _FRAME_KEEP) and "_tensor.py" not in fn:
            tail = "/".join(fn.split("/")[-2:])
            return f"{tail}:{f.get('line', 0)} {f.get('name', '')}"
    return "backward (autograd)" if not frames else "other"


def build_timeline(trace, marks, persistent, grad_ptrs, logits_unit):
    """Allocations and frees in order, each block with a category, and the phase marks aligned
    to event indices. A mark's index is the last event at or before its time whose running
    total equals the allocated bytes the allocator reported at the mark, so marks do not
    depend on the two clocks agreeing to the microsecond.

    Categories: blocks never freed at a parameter's or optimizer tensor's address are weights
    or optimizer state; blocks alive when the last optimizer step began at a gradient's address
    are gradients; vocabulary-sized blocks are logits; a block made in forward and freed in
    backward was saved for backward (activations); everything else is a temporary."""
    import bisect
    frames, frame_ids = [], {}
    events = []  # [kind, block id, size, frame, addr, stream]
    streams = {0: 0}  # CUDA stream handle -> 0 (the default stream), 1, 2... in order of first use
    blocks = {}  # addr -> (id, size)
    next_id = 0
    cum = 0
    cums, times = [], []
    for e in trace:
        a = e.get("action")
        size = int(e.get("size", 0))
        addr = int(e.get("addr", 0))
        if a == "alloc":
            fr = frame_of(e.get("frames"))
            if fr not in frame_ids:
                frame_ids[fr] = len(frames)
                frames.append(fr)
            blocks[addr] = (next_id, size)
            cum += size
            raw = e.get("stream", 0)
            st = streams.setdefault(raw if isinstance(raw, int) else 0, len(streams))
            events.append([0, next_id, size, frame_ids[fr], addr, st])
            next_id += 1
        elif a == "free_completed":
            blk = blocks.pop(addr, None)
            if blk is None:
                continue  # allocated before recording started
            cum -= blk[1]
            events.append([1, blk[0], blk[1], -1, addr, 0])
        elif a in ("segment_alloc", "segment_map"):
            events.append([2, -1, size, -1, addr, 0])
        elif a in ("segment_free", "segment_unmap"):
            events.append([3, -1, size, -1, addr, 0])
        else:
            continue
        cums.append(cum)
        times.append(int(e.get("time_us", 0)))
    have_times = any(times)
    aligned = []
    for label, t_us, allocated in marks:
        i = bisect.bisect_right(times, t_us) if have_times else len(cums)
        j = i
        while j > 0 and cums[j - 1] != allocated:
            j -= 1
        exact = j > 0 or allocated == 0
        aligned.append(dict(label, event=j if exact else i, allocated_bytes=allocated, exact=exact))
    aligned.sort(key=lambda m: m["event"])
    phase_at = []
    k, cur = 0, "after_load"
    for idx in range(len(events)):
        while k < len(aligned) and aligned[k]["event"] <= idx:
            cur = aligned[k]["phase"]
            k += 1
        phase_at.append(cur)
    last_opt = max((m["event"] for m in aligned if m["phase"] == "optimizer"), default=len(events))
    born, freed = {}, {}
    for idx, (kind, bid, size, _, addr, _) in enumerate(events):
        if kind == 0:
            born[bid] = (idx, addr)
        elif kind == 1:
            freed[bid] = idx
    cat = {}
    for bid, (b_idx, addr) in born.items():
        f_idx = freed.get(bid)
        size = events[b_idx][2]
        if f_idx is None and addr in persistent:
            c = persistent[addr]
        elif addr in grad_ptrs and b_idx < last_opt and (f_idx is None or f_idx >= last_opt):
            c = "gradients"
        elif logits_unit and size >= 2 * logits_unit and size % logits_unit == 0:
            c = "logits"
        elif f_idx is not None and phase_at[b_idx] == "forward" and phase_at[f_idx] == "backward":
            c = "activations"
        else:
            c = "temporaries"
        cat[bid] = CATEGORIES.index(c)
    out_events = []
    for kind, bid, size, fr, addr, st in events:
        if kind == 0:  # the stream only when it is not the default one (the allocator pools by stream)
            out_events.append([0, bid, size, cat[bid], fr, addr] + ([st] if st else []))
        elif kind == 1:
            out_events.append([1, bid, size])
        else:
            out_events.append([kind, size])
    return {"frames": frames, "events": out_events, "marks": aligned, "categories": list(CATEGORIES),
            "event_kinds": ["alloc", "free", "segment_alloc", "segment_free"]}


def snapshot_at_peak(trace, marks, step):
    """The live blocks at the moment of the step's highest allocated total (docs/probe-protocol.md)."""
    times = [int(e.get("time_us", 0)) for e in trace]
    start = min((m[1] for m in marks if m[0].get("step") == step), default=None)
    live, segs = {}, {}
    cum, best, best_state = 0, -1, None
    for i, e in enumerate(trace):
        a = e.get("action")
        addr, size = int(e.get("addr", 0)), int(e.get("size", 0))
        if a == "alloc":
            live[addr] = size
            cum += size
        elif a == "free_completed" and addr in live:
            cum -= live.pop(addr)
        elif a in ("segment_alloc", "segment_map"):
            segs[addr] = size
        elif a in ("segment_free", "segment_unmap"):
            segs.pop(addr, None)
        if start is not None and times[i] >= start and cum > best:
            best = cum
            best_state = (dict(live), dict(segs))
    if best_state is None:
        return None
    live, segs = best_state
    sizes = sorted(live.values(), reverse=True)
    seg_list = []
    for base, total in sorted(segs.items()):
        inside = [s for a, s in live.items() if base <= a < base + total]
        seg_list.append({"total_bytes": total, "allocated_bytes": sum(inside), "allocated_blocks": len(inside),
                         "pool": "small" if total <= (2 << 20) else "large"})
    return {"schema_version": SCHEMA_VERSION, "kind": "probe_snapshot", "device": "cuda",
            "taken_at": f"peak of step {step} (exact, from the allocator trace)",
            "allocated_bytes": best, "step_peak_allocated_bytes": best, "live_blocks": len(live),
            "largest_block_bytes": sizes[:64], "segments": seg_list[:4096]}


# ---------------------------------------------------------------- a user's snapshot
def _plain_unpickler(f):
    """torch.cuda.memory._dump_snapshot pickles plain dicts, lists, strings and numbers: refuse
    anything that would import a class (a pickle can run code; the file is the user's own, but a
    snapshot never needs it)."""
    import pickle

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise BadRequest("snapshot", f"{module}.{name}", "a memory snapshot holds plain data only")
    return Plain(f)


def _phase_of(frame):
    if frame.startswith("backward"):
        return "backward"
    if frame.startswith("optim/") or "torch/optim" in frame:  # frame_of keeps the path's last two parts
        return "optimizer"
    return "forward"


def convert_snapshot(path, out_path, limit=2 << 30):
    """A memory snapshot from the user's own training (torch.cuda.memory._dump_snapshot, with
    _record_memory_history on) as a probe_timeline: the busiest device's trace, every allocation
    and free, phases read from the frames (autograd's are backward, torch/optim's the optimizer,
    the rest forward), steps cut where a forward follows an optimizer step; the last whole step
    is the one to draw."""
    size = os.path.getsize(path)
    if size > limit:
        raise BadRequest("snapshot", f"{size} bytes", f"is larger than the {limit}-byte limit")
    with open(path, "rb") as f:
        try:
            snap = _plain_unpickler(f).load()
        except BadRequest:
            raise
        except Exception as e:
            raise BadRequest("snapshot", os.path.basename(path), f"not a PyTorch memory snapshot ({type(e).__name__})")
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        raise BadRequest("snapshot.device_traces", "(missing)",
                         "no allocation trace: record it with torch.cuda.memory._record_memory_history() first")
    traces = [t for t in snap["device_traces"] if isinstance(t, list)]
    trace = max(traces, key=len) if traces else []
    if not any(isinstance(e, dict) and e.get("action") == "alloc" for e in trace):
        raise BadRequest("snapshot.device_traces", "0 allocations", "the trace is empty")
    tl = build_timeline(trace, [], {}, set(), 0)
    # Blocks allocated before recording began (the weights, usually) are not in the trace; what
    # the segments hold at the dump, less what the trace leaves alive, is that baseline.
    alive_at_end = {}
    for e in tl["events"]:
        if e[0] == 0:
            alive_at_end[e[1]] = e[2]
        elif e[0] == 1:
            alive_at_end.pop(e[1], None)
    active = 0
    for seg in snap.get("segments") or []:
        for b in (seg.get("blocks") or []) if isinstance(seg, dict) else []:
            if isinstance(b, dict) and b.get("state") == "active_allocated":
                active += int(b.get("size", 0))
    tl["startup_bytes"] = max(0, active - sum(alive_at_end.values()))
    frames = tl["frames"]
    marks, step, cur = [], 0, None
    for i, e in enumerate(tl["events"]):
        if e[0] != 0:
            continue
        ph = _phase_of(frames[e[4]])
        if ph == cur:
            continue
        if ph == "forward" and cur == "optimizer":
            step += 1
        if ph == "backward" and cur is None:
            marks.append({"step": step, "phase": "forward", "micro_batch": 0, "event": 0, "allocated_bytes": 0,
                          "exact": False})
        marks.append({"step": step, "phase": ph, "micro_batch": 0, "event": i, "allocated_bytes": 0, "exact": False})
        cur = ph
    whole = step - 1 if step >= 1 and cur != "optimizer" else step
    tl["marks"] = marks
    tl.update({"schema_version": SCHEMA_VERSION, "kind": "probe_timeline", "engine": "snapshot",
               "device": "cuda", "step": max(whole, 0), "source_file": os.path.basename(path)})
    write_atomically(out_path, tl, indent=None)
    return tl


# ---------------------------------------------------------------- the run
def main(argv=None):
    ap = argparse.ArgumentParser(prog="headroom_engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--request", default="-")
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--snapshot")
    ap.add_argument("--timeline")
    ap.add_argument("--memory-cap-bytes", type=int, default=0)
    ap.add_argument("--model-factory")
    ap.add_argument("--rank-dir")
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--sharding", choices=("fsdp", "deepspeed"), default="fsdp")
    ap.add_argument("--alloc-conf")
    ap.add_argument("--no-attribution", action="store_true")
    ap.add_argument("--convert-snapshot", metavar="SNAPSHOT.pickle",
                    help="convert a torch.cuda.memory._dump_snapshot file into a probe_timeline at --out, then exit")
    ap.add_argument("--torchrun", type=int, default=0,
                    help="start N ranks of this engine through torch.distributed.run (torchrun)")
    try:
        args, rest = ap.parse_known_args(argv)
        if rest:
            ap.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as e:
        return EXIT_BAD_REQUEST if e.code else EXIT_OK
    if args.convert_snapshot:
        try:
            if not args.out:
                raise BadRequest("--out", "(missing)", "--convert-snapshot writes the timeline there")
            convert_snapshot(args.convert_snapshot, args.out)
            return EXIT_OK
        except BadRequest as e:
            print(f"headroom-engine: {e}", file=sys.stderr)
            return EXIT_BAD_REQUEST
        except OSError as e:
            print(f"headroom-engine: snapshot = {args.convert_snapshot}: {e.strerror}", file=sys.stderr)
            return EXIT_BAD_REQUEST
    if args.torchrun:
        return torchrun(args.torchrun, [a for a in (argv if argv is not None else sys.argv[1:])])
    rank = int(os.environ.get("RANK", "0"))
    out = Output(quiet=rank != 0)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    t_start = time.time()

    def fail(code, message, field=None):
        ev = {"event": "error", "code": code, "message": short(message, 2000)}
        if field:
            ev["field"] = field
        out.emit(ev, force=rank == 0)
        if args.rank_dir:
            try:
                write_atomically(os.path.join(args.rank_dir, f"rank{rank}.error.json"), ev)
            except OSError:
                pass
        print(f"headroom-engine: {ev['message']}", file=sys.stderr)
        return code

    def stopped():
        out.emit({"event": "stopped", "signal": _signal[0] or signal.SIGTERM}, force=rank == 0)
        # Straight out: nothing is left to save, and tearing down torch can take a second.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + (_signal[0] or signal.SIGTERM))

    try:
        if args.alloc_conf:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf  # before CUDA starts
        R = parse_request(read_request(args.request))
        if args.steps is not None:
            if not 1 <= args.steps <= 1000:
                raise BadRequest("--steps", args.steps, "must be between 1 and 1000")
            R["steps"] = args.steps
        if args.device:
            R["device"] = args.device
        if args.memory_cap_bytes < 0:
            raise BadRequest("--memory-cap-bytes", args.memory_cap_bytes, "must be positive")
        return run(args, R, out, t_start, rank)
    except BadRequest as e:
        return fail(EXIT_BAD_REQUEST, str(e), e.field)
    except Missing as e:
        return fail(EXIT_NO_DEVICE, str(e))
    except Stopped:
        return stopped()
    except KeyboardInterrupt:
        _signal[0] = signal.SIGINT
        return stopped()
    except BaseException as e:  # the protocol's internal error, never a bare traceback
        if _stop.is_set():
            return stopped()
        import traceback
        traceback.print_exc(file=sys.stderr)
        return fail(EXIT_INTERNAL, f"internal error: {type(e).__name__}: {e}")


def run(args, R, out, t_start, rank):
    try:
        import torch
    except ImportError as e:
        raise Missing(f"the transformers engine needs PyTorch, which this interpreter ({sys.executable}) "
                      f"cannot import: {short(str(e), 120)}")
    factory_path = args.model_factory or os.environ.get("HEADROOM_MODEL_FACTORY") or None
    try:
        factory = load_factory(factory_path) if factory_path else None
    except ImportError as e:
        raise Missing(f"--model-factory {factory_path} needs a package this interpreter cannot import: "
                      f"{short(str(e), 120)}")
    cfg = R["config"]
    D = Dist(torch, args, cfg)
    want_cuda = R["device"] != "cpu"
    cuda = want_cuda and torch.cuda.is_available()
    if R["device"] == "cuda" and not cuda:
        raise Missing("no CUDA device is usable (driver missing or no GPU)")
    if D.enabled and cfg["world_size"] not in (1, D.world):
        raise BadRequest("config.world_size", cfg["world_size"], f"differs from the {D.world} ranks started")
    if D.enabled:
        cfg["world_size"] = D.world
        # Each rank records its own stream: rank 0 at the path given, rank r at PATH.rank<r>.
        if D.rank > 0:
            if args.timeline:
                args.timeline = f"{args.timeline}.rank{D.rank}"
            if args.snapshot:
                args.snapshot = f"{args.snapshot}.rank{D.rank}"
    if cuda:
        if D.device_index() >= torch.cuda.device_count():
            raise Missing(f"no CUDA device {D.device_index()} for rank {D.rank} (one GPU per rank: "
                          f"{D.world} ranks need {D.world} GPUs; --share-gpu puts them on one)")
        torch.cuda.set_device(D.device_index())
        torch.cuda.init()
    device = torch.device("cuda", D.device_index()) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, D.world)))
    meter = CudaMeter(torch) if cuda else CpuMeter(torch)
    try:
        return measure(args, R, out, factory, t_start, torch, cfg, D, cuda, device, meter)
    finally:
        if not cuda and not _stop.is_set():
            meter.finish()  # the profiler stops on every path but a stop, which exits at once


def measure(args, R, out, factory, t_start, torch, cfg, D, cuda, device, meter):
    info = {"engine_version": VERSION, "python": sys.version.split()[0], "torch": torch.__version__}
    t_init = time.time() - t_start
    D.init(cuda)
    if args.memory_cap_bytes and cuda:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.memory_cap_bytes / total), device)
        info["memory_cap_bytes"] = args.memory_cap_bytes

    recorder = Recorder(torch) if cuda and (args.timeline or args.snapshot) else None
    if recorder:
        recorder.start()
    M = {
        "schema_version": SCHEMA_VERSION, "event": "result", "engine": "transformers",
        "device": "cuda" if cuda else "cpu",
        "device_name": torch.cuda.get_device_name(device) if cuda else cpu_name(),
        "driver": meter.driver() if cuda else "", "torch_version": torch.__version__,
        "headroom_version": VERSION, "created_at": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%dT%H:%M:%SZ"), "model": R["model"], "config": cfg, "warmup_steps": 1,
        "phases": [], "note": "", "oom": None, "shared_device": bool(D.enabled and D.share),
    }
    if not cuda:
        M["note"] = ("CPU mode: bytes from the profiler's record of CPU allocations; on CUDA add the cuBLAS "
                     "workspace, the caching allocator's slack and the CUDA context.")
    state = {"step": 0, "phase": "after_load", "micro": 0}
    marks = []  # CPU: (label, t_begin, t_end)

    def record_phase(step, phase, micro, seconds, before_mark=None, end_mark=None):
        pm = {"step": step, "phase": phase, "micro_batch": micro, "seconds": round(seconds, 6)}
        if cuda:
            st = meter.read()
            used, total = meter.device_used_total()
            pm.update({"peak_allocated_bytes": st["allocated_peak"], "peak_reserved_bytes": st["reserved_peak"],
                       "allocated_bytes": st["allocated"], "reserved_bytes": st["reserved"],
                       "device_used_bytes": used, "device_total_bytes": total,
                       "process_used_bytes": meter.process_used(),
                       "alloc_retries": st["retries"], "ooms": st["ooms"]})
        else:
            marks.append((pm, before_mark, end_mark))
        M["phases"].append(pm)
        return pm

    model = opt = None
    A = None
    weights = 0
    t_build = t_steps = 0.0
    last_step = R["steps"]  # steps are 0 (warm-up) .. R["steps"]
    grad_ptrs = set()
    try:
        t0 = time.time()
        # FSDP2 as a Trainer's model reaches it through accelerate: built on the CPU (Trainer
        # leaves an FSDP model where it is), then each fully_shard moves its unit's parameters
        # and buffers to the GPU and shards them (_move_states_to_device, then
        # _init_sharded_param): the GPU never holds the whole model. QLoRA quantizes on the GPU.
        build_device = device
        if cuda and D.enabled and D.zero >= 2 and D.sharding == "fsdp" and cfg["finetune"] != "qlora":
            build_device = "cpu"
            info["fsdp_build"] = "cpu, moved per unit by fully_shard"
        model = build_model(torch, R, build_device, factory, info)
        model, _ = wrap_parallel(torch, model, R, D, cuda, info)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise BadRequest("config.finetune", cfg["finetune"], "leaves no trainable parameter")
        opt = build_optimizer(torch, cfg, params, info, zero1=D.enabled and D.zero == 1 and D.sharding != "deepspeed")
        scaler = None
        if cfg["precision"] == "amp-fp16" and cuda:
            scaler = torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") \
                else torch.cuda.amp.GradScaler()
        vocab = int(R["hf_config"].get("vocab_size") or getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
        if vocab <= 0:
            raise BadRequest("model.config.vocab_size", "(missing)", "needed for the random batch")
        b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
        gen = torch.Generator(device="cpu")
        gen.manual_seed(1 + D.rank)  # each rank reads its own batch
        batches = [torch.randint(0, vocab, (b, s), generator=gen).to(device) for _ in range(ga)]
        meter.sync()
        info.update(model_info(torch, model, opt))
        layers0 = find_layers(model)
        info["layer_class"] = type(layers0[0]).__name__ if layers0 else None
        info["layers"] = len(layers0)
        weights = sum(storage_bytes(p.to_local() if hasattr(p, "to_local") else p) for p in model.parameters())
        t_build = time.time() - t0
        after = {"step": 0, "phase": "after_load", "micro_batch": 0, "seconds": 0.0}
        if cuda:
            st = meter.read()
            used, total = meter.device_used_total()
            after.update({"peak_allocated_bytes": st["allocated"], "peak_reserved_bytes": st["reserved"],
                          "allocated_bytes": st["allocated"], "reserved_bytes": st["reserved"],
                          "device_used_bytes": used, "device_total_bytes": total,
                          "process_used_bytes": meter.process_used(), "alloc_retries": 0, "ooms": 0})
            if recorder:
                recorder.mark({"step": 0, "phase": "after_load", "micro_batch": 0}, st["allocated"])
        else:
            marks.append((after, None, meter.mark()))
        M["phases"].append(after)
        if args.memory_cap_bytes and not cuda:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + args.memory_cap_bytes, resource.RLIM_INFINITY))
            info["memory_cap_bytes"] = args.memory_cap_bytes

        amp_dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(cfg["precision"])
        layers = find_layers(model)
        progress = Progress(out, len(layers), 1 + R["steps"], ga)
        hooks = install_progress_hooks(layers, progress)
        sync_ctx = gradient_sync_control(model, D)

        # Activation offload as PyTorch ships it: every tensor autograd saves in the forward is
        # copied to pinned host memory and brought back when backward unpacks it.
        offload = cfg["activation_offload"]
        if offload:
            info["activation_offload"] = "torch.autograd.graph.save_on_cpu(pin_memory=True)"

        def forward(ids):
            ctx = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else _Null()
            hooks_ctx = torch.autograd.graph.save_on_cpu(pin_memory=cuda) if offload else _Null()
            with hooks_ctx, ctx:
                loss = model(input_ids=ids, labels=ids).loss
            return loss / ga if ga > 1 else loss

        def backward(loss):
            (scaler.scale(loss) if scaler else loss).backward()

        def optimizer_step():
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()

        t_steps0 = time.time()
        for k in range(1 + R["steps"]):
            for m in range(ga):
                with sync_ctx(m == ga - 1):
                    state.update(step=k, phase="forward", micro=m)
                    loss = timed_phase(meter, progress, recorder, record_phase, k, "forward", m,
                                       lambda: forward(batches[m]))
                    state["phase"] = "backward"
                    timed_phase(meter, progress, recorder, record_phase, k, "backward", m, lambda l=loss: backward(l))
                    del loss
            state.update(phase="optimizer", micro=0)
            if recorder and k == last_step:
                grad_ptrs = {(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).data_ptr()
                             for p in model.parameters() if p.grad is not None}
            timed_phase(meter, progress, recorder, record_phase, k, "optimizer", 0, optimizer_step)
            opt.zero_grad(set_to_none=True)
        t_steps = time.time() - t_steps0
        if recorder:
            meter.sync()
            recorder.mark({"step": last_step, "phase": "end", "micro_batch": 0}, meter.allocated_now())
            finish_trace(args, recorder.stop(), recorder.marks, model, opt, grad_ptrs, R, last_step, cfg)
            recorder = None
        for h in hooks:
            h.remove()
        if not args.no_attribution:
            A = attribute(torch, model, opt, meter, vocab, forward, backward, optimizer_step, ga, batches, sync_ctx, D)
        progress.done()
    except (Stopped, BadRequest, Missing):
        raise
    except BaseException as e:
        if _stop.is_set():
            raise Stopped()
        if not is_oom(torch, e):
            raise
        e.__traceback__ = None
        msg = str(e).split("\n")[0]
        M["oom"] = {"step": state["step"], "phase": state["phase"], "requested_bytes": oom_requested_bytes(str(e)),
                    "in_use_bytes": 0, "message": short(msg, 500)}
        if cuda:
            st = meter.read()
            M["oom"]["in_use_bytes"] = int(st["allocated_peak"])
            M["oom_reserved"] = int(st["reserved_peak"])
        del e
        model = opt = A = None
        gc.collect()
        if t_steps == 0.0:
            t_steps = time.time() - t_start - t_init - t_build
    if not cuda:
        meter.finish()
        resolve_cpu_phases(meter, marks)
        if M["oom"] is not None:
            M["oom"]["in_use_bytes"] = max([p.get("peak_allocated_bytes", 0) for p in M["phases"]] + [0])
    finalize(M, A, cuda, weights)
    M["timing"] = {"wall_s": round(time.time() - t_start, 4), "init_s": round(t_init, 4),
                   "build_s": round(t_build, 4), "steps_s": round(t_steps, 4)}
    M["engine_info"] = info
    if D.enabled:
        M["backend"] = D.backend
        M["ranks"] = [rank_peak(M, D.rank, parameters_sum(torch, model, D) if model is not None else 0.0)]
    D.close()
    code = EXIT_OUT_OF_MEMORY if M["oom"] else EXIT_OK
    if args.rank_dir:
        write_atomically(os.path.join(args.rank_dir, f"rank{D.rank}.json"), M)
    if not D.enabled:
        out.emit(M)
        if args.out:
            try:
                write_atomically(args.out, M)
            except OSError as e:
                raise BadRequest("--out", args.out, f"cannot write the file ({e.strerror})")
    if M["oom"]:
        print(f"headroom-engine: out of memory in {M['oom']['phase']} of step {M['oom']['step']}", file=sys.stderr)
    return code


def torchrun(nproc, argv):
    """headroom-probe --nproc N: torch.distributed.run in this process, which starts N copies
    of this engine (RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous in their environment)."""
    try:
        from torch.distributed import run as trun
    except ImportError as e:
        print(f"headroom-engine: torch.distributed.run is not importable: {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    try:  # PyTorch 1.13 on Python 3.11: Std.from_str returns None for "0" (IntFlag membership)
        from torch.distributed.elastic.multiprocessing import api as mp_api
        if mp_api.Std.from_str("0") is None:
            orig = mp_api.Std.from_str
            mp_api.Std.from_str = classmethod(lambda cls, vm: cls(int(vm)) if vm.isdigit() else orig(vm))
    except Exception:
        pass
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--torchrun":
            skip = True
            continue
        if a.startswith("--torchrun="):
            continue
        rest.append(a)
    try:
        trun.main(["--standalone", "--nproc_per_node", str(nproc), os.path.abspath(__file__)] + rest)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_INTERNAL
    except BaseException as e:  # a rank failed: its own error file says why
        print(f"headroom-engine: torchrun: {type(e).__name__}: {short(str(e), 300)}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "CPU"


def vm_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def model_info(torch, model, opt):
    params = list(model.parameters())
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    trainable = [l for p, l in zip(params, local) if p.requires_grad]
    frozen = [l for p, l in zip(params, local) if not p.requires_grad]
    dtypes = {}
    for l in local:
        dtypes[str(l.dtype).replace("torch.", "")] = dtypes.get(str(l.dtype).replace("torch.", ""), 0) + \
            l.numel() * l.element_size()
    return {
        "params_total": int(sum(p.numel() for p in params)),
        "params_trainable": int(sum(p.numel() for p in params if p.requires_grad)),
        "weight_bytes": int(sum(l.numel() * l.element_size() for l in local)),
        "trainable_bytes": int(sum(l.numel() * l.element_size() for l in trainable)),
        "frozen_bytes": int(sum(l.numel() * l.element_size() for l in frozen)),
        "buffer_bytes": int(sum(b.numel() * b.element_size() for b in model.buffers())),
        "weight_bytes_by_dtype": dtypes,
    }


class Progress:
    """Progress events: before each phase, and after each decoder layer in forward and backward."""

    def __init__(self, out, layers, steps, ga):
        self.out, self.layers, self.steps, self.ga = out, max(1, layers), steps, ga
        self.per_step = 2 * ga + 1
        self.cur = (0, "forward", 0)
        self.last = 0.0

    def phase(self, step, phase, micro):
        self.cur = (step, phase, micro)
        self.emit(None)

    def layer(self, i):
        now = time.time()
        if now - self.last < 0.25:  # at most four layer events a second
            return
        self.emit(i)

    def emit(self, layer):
        step, phase, micro = self.cur
        idx = {"forward": 2 * micro, "backward": 2 * micro + 1, "optimizer": 2 * self.ga}[phase]
        frac = (step * self.per_step + idx) / (self.steps * self.per_step)
        ev = {"event": "progress", "step": step, "phase": phase, "fraction": round(min(frac, 1.0), 4)}
        if self.ga > 1:
            ev["micro_batch"] = micro
        if layer is not None:
            ev["layer"] = layer
            ev["layers"] = self.layers
        self.last = time.time()
        self.out.emit(ev)

    def done(self):
        self.out.emit({"event": "progress", "step": self.steps - 1, "phase": "optimizer", "fraction": 1.0})


def install_progress_hooks(layers, progress):
    """Per decoder layer: a stop check and a progress event in forward, and the same in backward
    through a hook on the layer's output gradient (hooks that allocate nothing)."""
    handles = []
    n = len(layers)

    for i, layer in enumerate(layers):
        def fwd(_m, _inp, output, i=i):
            check_stop()
            if progress.cur[1] == "forward":
                progress.layer(i)
            t = output[0] if isinstance(output, tuple) else output
            if getattr(t, "requires_grad", False) and getattr(t, "grad_fn", None) is not None:
                def on_grad(_g, i=i):
                    check_stop()
                    if progress.cur[1] == "backward":
                        progress.layer(n - 1 - i)
                t.register_hook(on_grad)
        handles.append(layer.register_forward_hook(fwd))
    return handles


def gradient_sync_control(model, D):
    """Accumulation without a collective per micro-batch, as accelerate does it: DDP's no_sync,
    FSDP2's set_requires_gradient_sync."""
    import contextlib

    def ctx(last):
        if not D.enabled or last:
            return contextlib.nullcontext()
        if hasattr(model, "no_sync"):
            return model.no_sync()
        if hasattr(model, "set_requires_gradient_sync"):
            @contextlib.contextmanager
            def fsdp():
                model.set_requires_gradient_sync(False)
                try:
                    yield
                finally:
                    model.set_requires_gradient_sync(True)
            return fsdp()
        return contextlib.nullcontext()
    return ctx


def timed_phase(meter, progress, recorder, record_phase, step, phase, micro, fn):
    check_stop()
    progress.phase(step, phase, micro)
    meter.sync()
    if meter.cuda:
        meter.reset_peak()
        if recorder:
            recorder.mark({"step": step, "phase": phase, "micro_batch": micro}, meter.allocated_now())
    t_begin = meter.mark()
    t0 = time.perf_counter()
    r = fn()
    meter.sync()
    record_phase(step, phase, micro, time.perf_counter() - t0, t_begin, meter.mark())
    return r


def resolve_cpu_phases(meter, marks):
    for pm, t0, t1 in marks:
        if t0 is None:  # after_load: the allocated total at that moment
            v = meter.at(t1)
            start = peak = end = v
        else:
            start, peak, end = meter.window(t0, t1)
        pm.update({"peak_allocated_bytes": peak, "peak_reserved_bytes": peak, "allocated_bytes": end,
                   "reserved_bytes": end, "device_used_bytes": 0, "device_total_bytes": 0, "process_used_bytes": 0,
                   "alloc_retries": 0, "ooms": 0})


def attribute(torch, model, opt, meter, vocab, forward, backward, optimizer_step, ga, batches, sync_ctx, D):
    """The instrumented step. Returns an Attributor (resolved in finalize), or None if this
    stack refuses saved-tensor hooks (then the result has no attribution)."""
    A = Attributor(torch, model, opt, meter, vocab)
    handles = []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        handles.append(head.register_forward_hook(A.on_logits))
    for p in model.parameters():
        if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
            handles.append(p.register_post_accumulate_grad_hook(A.on_grad))
    try:
        with torch.autograd.graph.saved_tensors_hooks(A.pack, A.unpack):
            for m in range(ga):
                with sync_ctx(m == ga - 1):
                    A.phase = "forward"
                    loss = forward(batches[m])
                    A.sample()
                    A.phase = "backward"
                    backward(loss)
                    del loss
                    A.rescan()
        # The optimizer phase: no hook fires inside step(); its sample after it sees the
        # gradients and the state, the step's own temporaries being the rest of its peak.
        A.phase = "optimizer"
        optimizer_step()
        A.sample()
        opt.zero_grad(set_to_none=True)
    except (Stopped, KeyboardInterrupt):
        raise
    except Exception as e:
        if D.enabled or is_oom(torch, e):
            raise
        print(f"headroom-engine: no attribution ({type(e).__name__}: {short(str(e), 200)})", file=sys.stderr)
        return None
    finally:
        for h in handles:
            h.remove()
    return A


def finalize(M, A, cuda, weights):
    """The steady-state peak (max over measured steps), the CUDA context, and the attribution."""
    steady = [p for p in M["phases"] if p["phase"] != "after_load" and p["step"] >= M["warmup_steps"]]
    if M["oom"] is None:
        best = max(steady, key=lambda p: p["peak_allocated_bytes"]) if steady else M["phases"][0]
        reserved = max([p["peak_reserved_bytes"] for p in steady] + [0])
        last = M["phases"][-1]
        base = (last.get("process_used_bytes") or last.get("device_used_bytes", 0)) if cuda else 0
        context = max(0, base - last.get("reserved_bytes", 0)) if cuda else 0
        M["peak"] = {"phase": best["phase"], "allocated_bytes": best["peak_allocated_bytes"],
                     "reserved_bytes": reserved, "cuda_context_bytes": context,
                     "device_total_bytes": reserved + context}
    else:
        o = M["oom"]
        seen = [p for p in M["phases"] if "peak_allocated_bytes" in p]
        reserved = max([p["peak_reserved_bytes"] for p in seen] + [M.get("oom_reserved", 0)])
        M.pop("oom_reserved", None)
        M["peak"] = {"phase": o["phase"], "allocated_bytes": max(o["in_use_bytes"], 0),
                     "reserved_bytes": max(reserved, o["in_use_bytes"]), "cuda_context_bytes": 0,
                     "device_total_bytes": max(reserved, o["in_use_bytes"])}
    attribution = A.result(M["peak"]["allocated_bytes"], weights) if (A is not None and M["oom"] is None) else None
    if attribution is None:
        attribution = {c: 0 for c in CATEGORIES}
        attribution["temporaries"] = M["peak"]["allocated_bytes"]
    M["attribution"] = attribution
    # The same by phase, at each steady phase's peak, for the per-phase view's measured bars.
    if A is not None and M["oom"] is None:
        by_phase = {}
        for ph in ("forward", "backward", "optimizer"):
            peaks = [p["peak_allocated_bytes"] for p in steady if p["phase"] == ph]
            a = A.result(max(peaks), weights, ph) if peaks else None
            if a is not None:
                by_phase[ph] = a
        if by_phase:
            M["phase_attribution"] = by_phase


def rank_peak(M, rank, psum):
    steady = {}
    for p in M["phases"]:
        if p["phase"] == "after_load" or p["step"] >= M["warmup_steps"]:
            cur = steady.get(p["phase"])
            if cur is None or p["peak_allocated_bytes"] > cur["peak_allocated_bytes"]:
                steady[p["phase"]] = p
    phases = [{"phase": ph, "step": steady[ph]["step"], "peak_allocated_bytes": steady[ph]["peak_allocated_bytes"],
               "peak_reserved_bytes": steady[ph]["peak_reserved_bytes"],
               "device_used_bytes": steady[ph].get("process_used_bytes") or steady[ph].get("device_used_bytes", 0)}
              for ph in PHASES if ph in steady]
    peak = M["peak"]
    r = {"rank": rank, "device_name": M["device_name"], "peak_phase": peak["phase"],
         "peak_allocated_bytes": peak["allocated_bytes"], "peak_reserved_bytes": peak["reserved_bytes"],
         "device_total_bytes": peak["device_total_bytes"], "parameters_sum": psum, "oom": M["oom"] is not None,
         "phases": phases}
    if M["oom"]:
        r["peak_phase"] = M["oom"]["phase"]
        r["peak_allocated_bytes"] = max(r["peak_allocated_bytes"], M["oom"]["in_use_bytes"])
    return r


def finish_trace(args, trace, marks, model, opt, grad_ptrs, R, last_step, cfg):
    if not trace:
        return
    persistent = {}
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        if local.numel():
            persistent[local.data_ptr()] = "weights"
    for v in state_tensors(opt):
        persistent[v.data_ptr()] = "optimizer_state"
    tokens = cfg["micro_batch"] * cfg["seq_len"]
    vocab = int(R["hf_config"].get("vocab_size", 0) or 0)
    if args.timeline:
        tl = build_timeline(trace, marks, persistent, grad_ptrs, tokens * vocab)
        tl.update({"schema_version": SCHEMA_VERSION, "kind": "probe_timeline", "engine": "transformers",
                   "device": "cuda", "config": cfg, "model_id": R["model_id"], "step": last_step,
                   "model_layout": describe_parameters(model)})
        write_atomically(args.timeline, tl, indent=None)
    if args.snapshot:
        snap = snapshot_at_peak(trace, marks, last_step)
        if snap:
            write_atomically(args.snapshot, snap)


if __name__ == "__main__":
    sys.exit(main())
