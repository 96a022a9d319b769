"""The model as the user's stack builds it: Transformers' from_config (or a factory), PEFT's
adapters, bitsandbytes' 4-bit base, Liger's fused loss."""
import gc
import re
import sys
import time

from . import vision
from .protocol import BadRequest, Missing, check_stop, short
from .request import _DROP_KEYS


def find_layers(model):
    """The decoder layers: the ModuleList named like HF's (`layers`, GPT-2's `h`, `blocks`), else
    the longest one (a ModuleList of experts inside a layer is not the layers). A vision-language
    model's are its language model's, not its vision tower's blocks (vision.part_of)."""
    import torch.nn as nn
    from .vision import part_of
    named, longest = None, None
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0 or part_of(name) != "language_model":
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


def lap(info, what, t0):
    """Seconds since t0 under engine_info.timing[what] (the engine's time budget, issue 27)."""
    info.setdefault("timing", {})[what] = round(time.perf_counter() - t0, 4)


def build_base(torch, R, device, factory, info):
    """The request's model as Transformers (or the factory) builds it on `device`, before PEFT,
    checkpointing, quantization or the fused loss."""
    cfg = R["config"]
    prec = cfg["precision"]
    pdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "amp-bf16": torch.float32, "amp-fp16": torch.float32}[prec]
    if cfg["finetune"] == "qlora":
        pdtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(prec, pdtype)
    hf = {k: v for k, v in R["hf_config"].items() if k not in _DROP_KEYS}
    attn = {"flash": "flash_attention_2"}.get(cfg["attention"], cfg["attention"])  # Note [Flash kernels]
    torch.manual_seed(0)
    if factory is not None:
        model = factory.build(dict(R["hf_config"]), pdtype, attn, device)
        info["model_class"] = type(model).__name__
    else:
        transformers = require("transformers", "the transformers engine")  # imported already (worker.preload)
        info["transformers"] = transformers.__version__
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification
        try:
            config = AutoConfig.for_model(R["model_type"], **hf)
        except (ValueError, KeyError) as e:
            raise BadRequest("model.config.model_type", R["model_type"],
                             f"Transformers {transformers.__version__} cannot build it ({short(str(e), 160)})")
        except TypeError as e:
            raise BadRequest("model.config", R["model_type"], f"not a valid config ({short(str(e), 160)})")
        # The trainers pass use_cache=False to the training forward; TRL's GRPOTrainer leaves the
        # config's own (config.json: true, as the class default) for generate, whose KV cache it
        # decides: turned off here, generate recomputed every token's whole prefix (2026-12-05).
        if cfg["mode"] != "grpo":
            config.use_cache = False
            text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
            text_config.use_cache = False  # a composite's language model reads its own
        auto = AutoModelForCausalLM
        if cfg.get("vision") is not None:  # issue 30: the checkpoint's ForConditionalGeneration
            from transformers import AutoModelForImageTextToText as auto
        if cfg["mode"] == "reward":
            # Issue 29: TRL's RewardTrainer builds AutoModelForSequenceClassification with one label,
            # and sets the pad token (the tokenizer's, else its eos) where the config has none
            auto = AutoModelForSequenceClassification
            config.num_labels = 1
            if getattr(config, "pad_token_id", None) is None:
                eos = getattr(config, "eos_token_id", None)
                config.pad_token_id = (eos[0] if isinstance(eos, list) and eos else eos) if eos is not None else 0
        t0 = time.perf_counter()
        old = torch.get_default_dtype()
        torch.set_default_dtype(pdtype)
        try:
            ctx = torch.device(device) if hasattr(torch.device, "__enter__") else None
            if ctx is not None:
                ctx.__enter__()
            try:
                try:
                    model = auto.from_config(config, dtype=pdtype, attn_implementation=attn)
                except TypeError:
                    model = auto.from_config(config, torch_dtype=pdtype, attn_implementation=attn)
                except ImportError as e:  # flash_attention_2 without the flash-attn package
                    raise BadRequest("config.attention", cfg["attention"],
                                     f"Transformers cannot load it here ({short(str(e), 160)}): pip install flash-attn, "
                                     "or use sdpa")
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
        finally:
            torch.set_default_dtype(old)
        lap(info, "from_config", t0)
        built_on = {p.device.type for p in model.parameters()}
        info["built_on"] = sorted(built_on)
        if built_on - {torch.device(device).type}:
            t0 = time.perf_counter()
            model = model.to(device)
            lap(info, "to_device", t0)
        info["model_class"] = type(model).__name__
        info["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    return model


def build_model(torch, R, device, factory, info):
    cfg = R["config"]
    model = build_base(torch, R, device, factory, info)
    check_stop()
    if cfg["loss"] == "fused":
        apply_fused_loss(model, info)
    if cfg["finetune"] == "qlora":
        model = quantize_4bit(torch, model, cfg, info)
    if cfg.get("vision") is not None and cfg["finetune"] == "full":
        vision.freeze(model, cfg, info)
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
        t0 = time.perf_counter()
        peft = require("peft", "LoRA")
        info["peft"] = peft.__version__
        targets = cfg["lora"]["targets"] if cfg["lora"]["targets"] != ["all-linear"] else "all-linear"
        if cfg.get("vision") is not None:
            targets = vision.lora_targets(model, cfg)
        lc = peft.LoraConfig(r=cfg["lora"]["rank"], lora_alpha=cfg["lora"]["alpha"],
                             lora_dropout=cfg["lora"]["dropout"], target_modules=targets,
                             task_type="SEQ_CLS" if cfg["mode"] == "reward" else "CAUSAL_LM")
        try:
            model = peft.get_peft_model(model, lc)
        except ValueError as e:
            raise BadRequest("config.lora.targets", cfg["lora"]["targets"], f"PEFT refused them ({short(str(e), 160)})")
        info["lora_modules"] = sum(1 for n, _ in model.named_modules() if n.endswith(".lora_A"))
        lap(info, "peft", t0)
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
