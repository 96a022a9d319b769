"""Issue 30: a vision-language step as the user's stack runs it. The model is the checkpoint's
ForConditionalGeneration (AutoModelForImageTextToText) built from its composite config.json; the
vision tower, the projector and the language model are each trained or frozen as the request says
(LLaMA-Factory's freeze_vision_tower, freeze_multi_modal_projector, freeze_language_model), LoRA
adapts the trained parts only; the batch holds as many image and video tokens as the processor
makes: pixel inputs of the processor's shapes (random values), the placeholder tokens in the text,
and the token types the processor returns.

Families, by how their processor turns an image into tokens:
- qwen (qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe): dynamic resolution.
  The image, first shrunk as the recipe's tool shrinks it (LLaMA-Factory's image_max_pixels: both
  sides scaled by sqrt(max / (h w)) and truncated), then Qwen2VLImageProcessor's smart_resize to
  multiples of patch x merge within the checkpoint's processor bounds; patches (t, h / patch,
  w / patch), tokens patches / merge^2. pixel_values is (patches, C x T x P x P) float32.
  A video's frames pair up (temporal_patch_size), t = frames / 2.
- fixed (gemma3, llava): every image is the tower's image_size square; gemma3's
  mm_tokens_per_image tokens between its boi and eoi tokens, llava's (image_size / patch)^2 (one more
  with vision_feature_select_strategy "full").
"""
import inspect
import math

from .protocol import BadRequest

QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
FIXED = ("gemma3", "llava")
# Qwen3-VL and Qwen3.5 wrap each video's temporal patch in its own vision_start ... vision_end
# (the processor writes a timestamp before each); Qwen2-VL and Qwen2.5-VL one block per video.
PER_FRAME_VIDEO = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
# Parameters by the part they belong to: projector first (it sits inside Qwen's visual module).
PROJECTOR_KEYS = (".merger.", "deepstack_merger_list", "multi_modal_projector")
TOWER_KEYS = ("visual.", "vision_tower.", "vision_model.")


def _int(d, key, lo, hi, default):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest(f"config.vision.{key}", v, f"must be a whole number between {lo} and {hi}")
    return v


def _size(d, key, default):
    v = d.get(key, default)
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                      and 1 <= x <= 1 << 15 for x in v)):
        raise BadRequest(f"config.vision.{key}", v, "must be [height, width] in pixels, each 1 to 32768")
    return v


def _bool(d, key, default):
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise BadRequest(f"config.vision.{key}", v, "must be true or false")
    return v


def parse_vision(c, cfg):
    """config.vision, or None: images and videos per sample, their sizes, the bounds, what trains."""
    d = c.get("vision")
    if d is None:
        return None
    if not isinstance(d, dict):
        raise BadRequest("config.vision", d, "must be a JSON object")
    big = 1 << 28
    v = {"images": _int(d, "images", 0, 64, 1), "image_size": _size(d, "image_size", [448, 448]),
         "max_pixels": _int(d, "max_pixels", 0, big, 0), "min_pixels": _int(d, "min_pixels", 0, big, 0),
         "processor_max_pixels": _int(d, "processor_max_pixels", 0, big, 0),
         "processor_min_pixels": _int(d, "processor_min_pixels", 0, big, 0),
         "videos": _int(d, "videos", 0, 16, 0), "video_frames": _int(d, "video_frames", 0, 4096, 0),
         "video_size": _size(d, "video_size", [256, 256]),
         "video_max_pixels": _int(d, "video_max_pixels", 0, big, 0),
         "video_min_pixels": _int(d, "video_min_pixels", 0, big, 0),
         "video_processor_max_pixels": _int(d, "video_processor_max_pixels", 0, big, 0),
         "video_processor_min_pixels": _int(d, "video_processor_min_pixels", 0, big, 0),
         "train_vision_tower": _bool(d, "train_vision_tower", False),
         "train_projector": _bool(d, "train_projector", False),
         "train_language_model": _bool(d, "train_language_model", True)}
    if v["videos"] and v["video_frames"] < 1:
        raise BadRequest("config.vision.video_frames", v["video_frames"], "a video needs at least one frame")
    if cfg["mode"] != "sft":
        raise BadRequest("config.mode", cfg["mode"], "a vision-language step is measured as supervised fine-tuning")
    if cfg["finetune"] == "qlora":
        raise BadRequest("config.finetune", "qlora", "a vision-language step is measured with full fine-tuning or "
                         "LoRA; QLoRA is not yet")
    if not (v["train_vision_tower"] or v["train_projector"] or v["train_language_model"]):
        raise BadRequest("config.vision.train_language_model", False, "every part is frozen: nothing trains")
    return v


def _smart_resize(h, w, factor, lo, hi):
    """Qwen2VLImageProcessor's smart_resize (transformers' own where it imports)."""
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
        return smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    except ImportError:
        pass
    hb, wb = max(factor, round(h / factor) * factor), max(factor, round(w / factor) * factor)
    if hb * wb > hi:
        beta = math.sqrt(h * w / hi)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < lo:
        beta = math.sqrt(lo / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def _tool_resize(h, w, lo, hi):
    """LLaMA-Factory's _preprocess_image: scale both sides into [lo, hi] pixels, truncating."""
    if hi and h * w > hi:
        f = math.sqrt(hi / (h * w))
        h, w = int(h * f), int(w * f)
    if lo and h * w < lo:
        f = math.sqrt(lo / (h * w))
        h, w = int(h * f), int(w * f)
    return max(1, h), max(1, w)


def qwen_grid(vc, size, lo, hi, proc_lo, proc_hi, frames=1):
    """(t, h, w) in patches for one image (frames 1) or video."""
    patch, merge, tp = vc["patch_size"], vc["spatial_merge_size"], vc["temporal_patch_size"]
    if proc_hi <= 0 or proc_lo <= 0:
        raise BadRequest("config.vision.processor_max_pixels", proc_hi, "the checkpoint processor's pixel bounds "
                         "are needed for a dynamic-resolution model")
    h, w = _tool_resize(size[0], size[1], lo, hi)
    hh, ww = _smart_resize(h, w, patch * merge, proc_lo, proc_hi)
    t = (frames + tp - 1) // tp  # the processor repeats the last frame to a whole temporal patch
    return t, hh // patch, ww // patch


def _cfg(model_config, key, *names, default=None):
    for n in names:
        v = getattr(model_config, n, None)
        if v is not None:
            return v
    if default is not None:
        return default
    raise BadRequest("model.config", key, f"the composite config names no {' / '.join(names)}")


def plan(torch, model, R, cfg):
    """Per sample: the token runs [(kind, count, token id, start id, end id)], and the pixel inputs'
    shapes, as the processor makes them."""
    mt, v = R["model_type"], cfg["vision"]
    mc = model.config
    vc_obj = mc.vision_config
    vc = {k: getattr(vc_obj, k, None) for k in ("patch_size", "spatial_merge_size", "temporal_patch_size",
                                                "image_size", "in_channels", "num_channels")}
    runs, grids, vgrids = [], [], []
    if mt in QWEN:
        image_id = _cfg(mc, "image_token_id", "image_token_id")
        video_id = _cfg(mc, "video_token_id", "video_token_id")
        start = _cfg(mc, "vision_start_token_id", "vision_start_token_id")
        end = _cfg(mc, "vision_end_token_id", "vision_end_token_id")
        merge2 = vc["spatial_merge_size"] ** 2
        for _ in range(v["images"]):
            g = qwen_grid(vc, v["image_size"], v["min_pixels"], v["max_pixels"], v["processor_min_pixels"],
                          v["processor_max_pixels"])
            grids.append(g)
            runs.append(("image", g[0] * g[1] * g[2] // merge2, image_id, start, end))
        for _ in range(v["videos"]):
            g = qwen_grid(vc, v["video_size"], v["video_min_pixels"], v["video_max_pixels"],
                          v["video_processor_min_pixels"] or v["processor_min_pixels"],
                          v["video_processor_max_pixels"] or v["processor_max_pixels"], v["video_frames"])
            vgrids.append(g)
            if mt in PER_FRAME_VIDEO:
                runs += [("video", g[1] * g[2] // merge2, video_id, start, end)] * g[0]
            else:
                runs.append(("video", g[0] * g[1] * g[2] // merge2, video_id, start, end))
    elif mt in FIXED:
        if v["videos"]:
            raise BadRequest("config.vision.videos", v["videos"], f"{mt} takes no video")
        image_id = _cfg(mc, "image_token_id", "image_token_id", "image_token_index")
        if mt == "gemma3":
            count = int(_cfg(mc, "mm_tokens_per_image", "mm_tokens_per_image"))
            start = _cfg(mc, "boi_token_id", "boi_token_id", "boi_token_index")
            end = _cfg(mc, "eoi_token_id", "eoi_token_id", "eoi_token_index")
        else:
            count = (vc["image_size"] // vc["patch_size"]) ** 2
            if getattr(mc, "vision_feature_select_strategy", "default") == "full":
                count += 1
            start = end = None
        runs = [("image", count, image_id, start, end)] * v["images"]
        grids = [None] * v["images"]
    else:
        raise BadRequest("model.config.model_type", mt, "images are measured for " + ", ".join(QWEN + FIXED))
    return runs, grids, vgrids, vc


def _text_bound(mc, vocab):
    """Random text tokens stay below every special token id the processor places."""
    ids = []
    for n in ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
              "vision_end_token_id", "boi_token_id", "boi_token_index", "eoi_token_id", "eoi_token_index"):
        x = getattr(mc, n, None)
        if isinstance(x, int) and 0 <= x < vocab:
            ids.append(x)
    return max(1, min(ids + [vocab]))


def setup(torch, model, R, cfg, device, info):
    """(loss function, batch maker) of a vision-language step."""
    runs, grids, vgrids, vc = plan(torch, model, R, cfg)
    mt, v = R["model_type"], cfg["vision"]
    b, s = cfg["micro_batch"], cfg["seq_len"]
    used = sum(n + (st is not None) + (en is not None) for _, n, _, st, en in runs)
    if used + 1 > s:
        raise BadRequest("config.seq_len", s, f"holds no room for the images and videos: they take {used} tokens")
    mc = model.config
    info["vision"] = {"image_tokens": [r[1] for r in runs if r[0] == "image"][:1] or [0],
                      "video_tokens": sum(r[1] for r in runs if r[0] == "video"), "multimodal_tokens": used,
                      "image_grid": list(grids[0]) if grids and grids[0] else None,
                      "video_grid": list(vgrids[0]) if vgrids else None}
    params = set(inspect.signature(model.forward).parameters)
    if hasattr(model, "get_base_model"):
        params |= set(inspect.signature(model.get_base_model().forward).parameters)
    text_hi = _text_bound(mc, int(getattr(mc.get_text_config(), "vocab_size", 0) or R["hf_config"].get("vocab_size", 0)))
    channels = vc["in_channels"] or vc["num_channels"] or 3

    def batches(torch, vocab, cfg, gen, dev):
        out = []
        for _ in range(cfg["grad_accum"]):
            ids = torch.randint(0, text_hi, (b, s), generator=gen)
            types = torch.zeros((b, s), dtype=torch.long)
            pos = 1
            for kind, n, tok, st, en in runs:
                if st is not None:
                    ids[:, pos] = st
                    pos += 1
                ids[:, pos:pos + n] = tok
                types[:, pos:pos + n] = 1 if kind == "image" else 2
                pos += n
                if en is not None:
                    ids[:, pos] = en
                    pos += 1
            labels = ids.masked_fill(types > 0, -100)
            batch = {"input_ids": ids.to(dev), "labels": labels.to(dev)}
            if mt in QWEN:
                if grids:
                    rows = sum(t * h * w for t, h, w in grids) * b
                    cols = channels * vc["temporal_patch_size"] * vc["patch_size"] ** 2
                    batch["pixel_values"] = torch.randn((rows, cols), generator=gen).to(dev)
                    batch["image_grid_thw"] = torch.tensor([list(g) for g in grids] * b, dtype=torch.long).to(dev)
                if vgrids:
                    rows = sum(t * h * w for t, h, w in vgrids) * b
                    cols = channels * vc["temporal_patch_size"] * vc["patch_size"] ** 2
                    batch["pixel_values_videos"] = torch.randn((rows, cols), generator=gen).to(dev)
                    batch["video_grid_thw"] = torch.tensor([list(g) for g in vgrids] * b, dtype=torch.long).to(dev)
            elif grids:
                size = vc["image_size"]
                batch["pixel_values"] = torch.randn((b * len(grids), channels, size, size), generator=gen).to(dev)
            for name in ("mm_token_type_ids", "token_type_ids"):
                if name in params:
                    batch[name] = types.to(dev)
                    break
            out.append((batch,))
        return out

    def loss(batch):
        return model(**batch).loss

    return loss, batches


def part_of(name):
    """'projector', 'vision_tower' or 'language_model' for a parameter or module name."""
    n = "." + name + "."
    if any(k in n for k in PROJECTOR_KEYS):
        return "projector"
    if any("." + k in n for k in TOWER_KEYS):
        return "vision_tower"
    return "language_model"


def trained(cfg, part):
    v = cfg["vision"]
    return {"vision_tower": v["train_vision_tower"], "projector": v["train_projector"],
            "language_model": v["train_language_model"]}[part]


def freeze(model, cfg, info):
    """Full fine-tuning: the frozen parts keep no gradient (requires_grad False)."""
    counts = {}
    for name, p in model.named_parameters():
        part = part_of(name)
        if not trained(cfg, part):
            p.requires_grad_(False)
        counts[part] = counts.get(part, 0) + p.numel()
    info["vision_parts"] = counts


def lora_targets(model, cfg):
    """The Linear modules LoRA adapts: the request's targets (module-name suffixes, or all-linear)
    inside the trained parts only, as full names (LLaMA-Factory's patch_target_modules)."""
    import torch.nn as nn
    targets = cfg["lora"]["targets"]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = []
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or mod is head or not trained(cfg, part_of(name)):
            continue
        if targets == ["all-linear"] or name.split(".")[-1] in targets:
            names.append(name)
    if not names:
        raise BadRequest("config.lora.targets", targets, "match no Linear layer in the parts that train")
    return names
