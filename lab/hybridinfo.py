"""lab/hybridinfo.sh's Python half: python3 lab/hybridinfo.py OUT.json"""
import importlib.util
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = {"transformers": transformers.__version__, "torch": torch.__version__}
types = ["qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "gemma4", "gemma4_text", "nemotron_h",
         "deepseek_v3", "deepseek_v32", "deepseek_v4", "qwen3_next"]
out["causal_lm_class"] = {t: MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(t) for t in types}
out["installed"] = {m: importlib.util.find_spec(m) is not None
                    for m in ["fla", "causal_conv1d", "kernels", "mamba_ssm", "flash_attn", "peft"]}


def built(cfg):
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    names = [n for n, _ in m.named_parameters()]
    return {"class": type(m).__name__, "params": sum(p.numel() for p in m.parameters()),
            "vision_params": sum(p.numel() for n, p in m.named_parameters() if "visual" in n or "vision" in n),
            "prefixes": sorted({".".join(n.split(".")[:2]) for n in names})[:20]}


for t in ["qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"]:
    try:
        cfg = AutoConfig.for_model(t)
        out.setdefault("defaults", {})[t] = cfg.to_dict()
        out.setdefault("built_from_defaults", {})[t] = built(cfg)
    except Exception as e:  # noqa: BLE001 (recorded)
        out.setdefault("errors", {})[t] = repr(e)[:400]
for f in ["qwen3.5-9b", "qwen3.5-35b-a3b"]:
    p = json.load(open(os.path.join(ROOT, "resources", "models", f + ".json")))
    c = dict(p["config"])
    try:
        out.setdefault("presets", {})[f] = built(AutoConfig.for_model(c.pop("model_type"), **c))
    except Exception as e:  # noqa: BLE001
        out.setdefault("errors", {})[f] = repr(e)[:400]
json.dump(out, open(sys.argv[1], "w"), indent=1, default=str)
print(json.dumps({k: out[k] for k in ("causal_lm_class", "installed")}, indent=1))
print(json.dumps(out.get("presets"), indent=1), json.dumps(out.get("errors"), indent=1))
