"""Issue 30's cases: vision-language steps as the user's stack runs them (probes/hrengine/vision.py)
over four families (Qwen2.5-VL, Qwen3-VL, Gemma 3, LLaVA 1.5), built from the checkpoints'
config.json (tests/data/configs/vl/) cut in depth where a full step would not fit: images per
sample, resolution and the pixel bounds, video, the tower frozen or trained, full and LoRA.
Run by lab/posttrain.sh with SET=vl (bash lab/run vl)."""
import copy, json, os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# The checkpoints' processor bounds (preprocessor_config.json, video_preprocessor_config.json):
# Qwen2.5-VL's one file for images and video; Qwen3-VL's size.shortest_edge / longest_edge.
QWEN25_BOUNDS = {"processor_min_pixels": 3136, "processor_max_pixels": 12845056}
QWEN3_BOUNDS = {"processor_min_pixels": 65536, "processor_max_pixels": 16777216,
                "video_processor_min_pixels": 4096, "video_processor_max_pixels": 25165824}

# model: (config file, cut: {path: value}, processor bounds)
MODELS = {
    "q25vl": ("qwen2.5-vl-7b", {"text_config.num_hidden_layers": 4, "vision_config.depth": 8,
                                "vision_config.fullatt_block_indexes": [3, 7]}, QWEN25_BOUNDS),
    "q3vl": ("qwen3-vl-8b", {"text_config.num_hidden_layers": 4, "vision_config.depth": 8,
                             "vision_config.deepstack_visual_indexes": [1, 3, 5]}, QWEN3_BOUNDS),
    "g3": ("gemma-3-4b-it", {"text_config.num_hidden_layers": 6, "vision_config.num_hidden_layers": 6}, {}),
    "llava": ("llava-1.5-7b", {"text_config.num_hidden_layers": 4, "vision_config.num_hidden_layers": 6}, {}),
    # Qwen3.5's composite checkpoints as Qwen3_5(Moe)ForConditionalGeneration builds them (a Qwen3-VL
    # tower without deepstack over the hybrid DeltaNet language model; tests/data/configs/vl/ says
    # where the vision_config's values come from); the processor's bounds are Qwen3-VL's
    "q35vl": ("qwen3.5-9b", {"text_config.num_hidden_layers": 8, "text_config.layer_types": ["linear_attention"] * 3
                            + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
                            "vision_config.depth": 8}, QWEN3_BOUNDS),
    "q3vlmoe": ("qwen3-vl-30b-a3b", {"text_config.num_hidden_layers": 4, "vision_config.depth": 8,
                                     "vision_config.deepstack_visual_indexes": [1, 3, 5]}, QWEN3_BOUNDS),
    "q35moevl": ("qwen3.5-35b-a3b", {"text_config.num_hidden_layers": 4, "text_config.layer_types":
                                     ["linear_attention"] * 3 + ["full_attention"], "vision_config.depth": 8},
                 QWEN3_BOUNDS),
}

# name: (model, finetune, micro_batch, seq_len, checkpointing, vision block)
T, P, L = "train_vision_tower", "train_projector", "train_language_model"
VL = {
    "q25vl-lora-1img448-b2s1024": ("q25vl", "lora", 2, 1024, False, {"images": 1, "image_size": [448, 448]}),
    "q25vl-lora-1img1024-max768-b1s2048": ("q25vl", "lora", 1, 2048, False,
                                           {"images": 1, "image_size": [1024, 1024], "max_pixels": 589824}),
    "q25vl-lora-4img336-b1s2048": ("q25vl", "lora", 1, 2048, False, {"images": 4, "image_size": [336, 504]}),
    "q25vl-full-tower-1img672-b1s2048": ("q25vl", "full", 1, 2048, False,
                                         {"images": 1, "image_size": [672, 672], T: True, P: True}),
    "q25vl-full-frozen-1img672-b1s2048": ("q25vl", "full", 1, 2048, False, {"images": 1, "image_size": [672, 672]}),
    "q25vl-lora-tower-ckpt-2img448-b2s2048": ("q25vl", "lora", 2, 2048, True,
                                              {"images": 2, "image_size": [448, 448], T: True, P: True}),
    "q25vl-lora-video16f-b1s2048": ("q25vl", "lora", 1, 2048, False,
                                    {"images": 0, "videos": 1, "video_frames": 16, "video_size": [360, 640],
                                     "video_max_pixels": 65536}),
    "q25vl-full-ckpt-1img1344-b1s4096": ("q25vl", "full", 1, 4096, True,
                                         {"images": 1, "image_size": [1344, 1344], P: True}),
    "q3vl-lora-1img512-b2s1024": ("q3vl", "lora", 2, 1024, False, {"images": 1, "image_size": [512, 512]}),
    "q3vl-full-tower-1img768-b1s2048": ("q3vl", "full", 1, 2048, False,
                                        {"images": 1, "image_size": [768, 768], T: True, P: True}),
    "q3vl-lora-video8f-b1s2048": ("q3vl", "lora", 1, 2048, False,
                                  {"images": 0, "videos": 1, "video_frames": 8, "video_size": [360, 640],
                                   "video_max_pixels": 65536}),
    "q3vl-lora-ckpt-3img384-b2s2048": ("q3vl", "lora", 2, 2048, True, {"images": 3, "image_size": [384, 384]}),
    "q3vl-full-frozen-ckpt-1img1024-b1s2048": ("q3vl", "full", 1, 2048, True,
                                               {"images": 1, "image_size": [1024, 1024]}),
    "g3-lora-1img-b2s1024": ("g3", "lora", 2, 1024, False, {"images": 1}),
    "g3-full-tower-1img-b1s1024": ("g3", "full", 1, 1024, False, {"images": 1, T: True, P: True}),
    "g3-lora-ckpt-2img-b2s2048": ("g3", "lora", 2, 2048, True, {"images": 2}),
    "g3-full-frozen-2img-b1s2048": ("g3", "full", 1, 2048, False, {"images": 2}),
    "llava-lora-1img-b4s1024": ("llava", "lora", 4, 1024, False, {"images": 1}),
    "llava-full-tower-1img-b2s1024": ("llava", "full", 2, 1024, False, {"images": 1, T: True, P: True}),
    "llava-full-frozen-ckpt-1img-b2s2048": ("llava", "full", 2, 2048, True, {"images": 1, P: True}),
}

# 2026-12-05 (sixteenth session), held out: Qwen2.5-VL frozen-tower steps with gradient checkpointing
# (the estimate predicts them: the measured ones ran without), their estimates committed before they
# run (tests/data/h200/vl-plan/predictions.tsv: python3 lab/vl.py --predict build/dev/app/headroom-cli)
VL2 = {
    "q25vl-lora-ckpt-2img672-b2s2048": ("q25vl", "lora", 2, 2048, True, {"images": 2, "image_size": [672, 672]}),
    "q25vl-full-frozen-ckpt-1img896-b2s2048": ("q25vl", "full", 2, 2048, True, {"images": 1, "image_size": [896, 896]}),
    "q25vl-lora-ckpt-video8f-b1s4096": ("q25vl", "lora", 1, 4096, True,
                                        {"images": 0, "videos": 1, "video_frames": 8, "video_size": [480, 640],
                                         "video_max_pixels": 131072}),
}
# 2026-12-06 (nineteenth session): Qwen3.5 with images (Axolotl's qwen3.5 vision recipes), measured
# before the composite had a row (the text row's estimate leaves the tower and the images out)
VL3 = {
    "q35vl-lora-1img512-b2s1024": ("q35vl", "lora", 2, 1024, False, {"images": 1, "image_size": [512, 512]}),
    "q35vl-lora-ckpt-2img448-b1s2048": ("q35vl", "lora", 1, 2048, True, {"images": 2, "image_size": [448, 448]}),
    "q35vl-full-tower-1img640-b1s1024": ("q35vl", "full", 1, 1024, False,
                                         {"images": 1, "image_size": [640, 640], T: True, P: True}),
    "q35vl-full-frozen-ckpt-1img768-b1s2048": ("q35vl", "full", 1, 2048, True, {"images": 1, "image_size": [768, 768]}),
    "q35vl-lora-video8f-b1s2048": ("q35vl", "lora", 1, 2048, False,
                                   {"images": 0, "videos": 1, "video_frames": 8, "video_size": [360, 640],
                                    "video_max_pixels": 65536}),
    "q35moevl-lora-ckpt-1img512-b1s2048": ("q35moevl", "lora", 1, 2048, True, {"images": 1, "image_size": [512, 512]}),
}
# 2026-12-06 (nineteenth session), held out: Qwen3-VL-MoE estimated (qwen3_vl_moe: Qwen3-VL's vision
# side over the Qwen3-MoE row), predicted before they run (tests/data/h200/vl-plan/predictions-vl4.tsv)
VL4 = {
    "q3vlmoe-lora-1img512-b2s1024": ("q3vlmoe", "lora", 2, 1024, False, {"images": 1, "image_size": [512, 512]}),
    "q3vlmoe-full-frozen-ckpt-1img768-b1s2048": ("q3vlmoe", "full", 1, 2048, True,
                                                 {"images": 1, "image_size": [768, 768]}),
    "q3vlmoe-lora-ckpt-video8f-b1s2048": ("q3vlmoe", "lora", 1, 2048, True,
                                          {"images": 0, "videos": 1, "video_frames": 8, "video_size": [360, 640],
                                           "video_max_pixels": 65536}),
}
CASES = {**VL, **VL2, **VL3, **VL4}


def model_config(key):
    name, cut, _ = MODELS[key]
    with open(os.path.join(ROOT, "tests", "data", "configs", "vl", name + ".json")) as f:
        cfg = json.load(f)
    for path, value in cut.items():
        node = cfg
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = copy.deepcopy(value)
    return name, cfg


def request(name):
    key, ft, b, s, ckpt, vision = CASES[name]
    model_name, hf = model_config(key)
    v = {**MODELS[key][2], **vision}
    cfg = {"precision": "bf16", "optimizer": "adamw", "optimizer_impl": "foreach", "finetune": ft,
           "micro_batch": b, "seq_len": s, "grad_checkpointing": ckpt, "attention": "sdpa",
           "lora": {"rank": 16, "alpha": 32, "dropout": 0.0, "targets": ALL_LINEAR}, "vision": v}
    return {"schema_version": 1, "kind": "probe_request", "steps": 2, "device": "cuda", "config": cfg,
            "model": {"config": hf, "headroom": {"id": f"{model_name} ({name.split('-')[0]} cut)"}}}


def predict(names, cli):
    """The estimate of each case before it runs (headroom-cli with the request's settings), as TSV."""
    import subprocess, sys, tempfile
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import timeline_diff
    print("name\tpeak_allocated_bytes\tpeak_reserved_bytes")
    for n in names:
        r = request(n)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(r["model"]["config"], f)
            cfg = dict(r["config"], world_size=1, zero_stage=0)
            out = subprocess.run([cli, "estimate", "--json", "--model", path] + timeline_diff.cli_flags(cfg),
                                 capture_output=True, text=True)
        if out.returncode:
            print(f"{n}\trefused\t{out.stderr.strip().splitlines()[-1][:200]}")
            continue
        e = json.loads(out.stdout)
        print(f"{n}\t{e['peak']['allocated_bytes']}\t{e['peak']['reserved_bytes']}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--predict", metavar="HEADROOM_CLI", required=True)
    ap.add_argument("--set", default="vl4", choices=["vl", "vl2", "vl3", "vl4"])
    a = ap.parse_args()
    predict(list({"vl": VL, "vl2": VL2, "vl3": VL3, "vl4": VL4}[a.set]), a.predict)
