// Qwen3.5's checkpoints (Qwen/Qwen3.5-9B, -27B): a qwen3_5 config.json with a vision_config and a
// text_config. AutoModelForCausalLM builds Qwen3_5ForCausalLM from its text_config alone (the
// checkpoint's model.visual weights are ignored on load), so the row is qwen3_5_text's, read from
// text_config. Fine-tuning the vision tower too is Qwen3_5ForConditionalGeneration (issue 30).
#include "family.h"

#include <string>
#include <utility>

namespace headroom {

namespace {
// Qwen3_5VisionModel's parameters (Qwen3-VL's tower without deepstack): a Conv3d patch embedding,
// learned positions, `depth` blocks of two LayerNorms, a biased qkv and proj and a biased MLP, and the
// merger (a LayerNorm, then spatial_merge_size^2 patches through two biased Linears to
// out_hidden_size, the language model's width by default).
int64_t visionTowerParams(const ConfigFields &v, int64_t textHidden)
{
    const int64_t H = v.integer("hidden_size", 1152), I = v.integer("intermediate_size", 4304);
    const int64_t depth = v.integer("depth", 27), patch = v.integer("patch_size", 16);
    const int64_t temporal = v.integer("temporal_patch_size", 2), channels = v.integer("in_channels", 3);
    const int64_t merge = v.integer("spatial_merge_size", 2), out = v.integer("out_hidden_size", textHidden);
    const int64_t positions = v.integer("num_position_embeddings", 2304);
    for (auto [key, x] : {std::pair{"hidden_size", H}, {"intermediate_size", I}, {"depth", depth}, {"patch_size", patch},
                          {"temporal_patch_size", temporal}, {"in_channels", channels}, {"spatial_merge_size", merge},
                          {"out_hidden_size", out}})
        if (x > (int64_t(1) << 16))
            v.refuse(key, std::to_string(x), "is implausibly large (limit 65536)");
    if (positions > (int64_t(1) << 24))
        v.refuse("num_position_embeddings", std::to_string(positions), "is implausibly large (limit 16777216)");
    if (merge > 64)
        v.refuse("spatial_merge_size", std::to_string(merge), "is implausibly large (limit 64)");
    // Every factor is at most 2^16 (positions 2^24, the merge 64): the products fit; the sums are checked.
    const int64_t block = 4 * H + (3 * H * H + 3 * H) + (H * H + H) + (H * I + I) + (I * H + H);
    const int64_t M = checkedMul(H, merge * merge);
    const int64_t merger = checkedAdd(2 * H + M, checkedAdd(checkedMul(M, M), checkedAdd(checkedMul(M, out), out)));
    return checkedAdd(checkedAdd(checkedMul(channels * temporal * patch * patch + 1, H), checkedMul(positions, H)),
                      checkedAdd(checkedMul(depth, block), merger));
}

// The composite's vision_config: the tower the estimate leaves out, counted for the report.
void readVision(const ConfigFields &c, ModelArch &m)
{
    if (c.has("vision_config") && c.json().at("vision_config").is_object())
        m.vision.towerParams = visionTowerParams(ConfigFields(c.json().at("vision_config"), "config.vision_config"), m.hiddenSize);
}
} // namespace

const Family &family_qwen3_5()
{
    static const Family f =
        family_qwen3_5_text().derive("qwen3_5").set(&FamilyTraits::textConfigNested).readsOuter(&readVision);
    return f;
}

} // namespace headroom
