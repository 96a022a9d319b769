// modeling_gemma3.py (Gemma3ForConditionalGeneration, built whole by AutoModelForImageTextToText;
// issue 30): Gemma 3's decoder (gemma3_text.cpp) from a text_config that states only what differs
// from Gemma3TextConfig's defaults, a SigLIP tower (no head) at a fixed image_size, and the
// projector (Gemma3MultiModalProjector: the patches average-pooled to mm_tokens_per_image, an
// RMSNorm and a projection matrix to the text width). Each image is mm_tokens_per_image tokens
// between <start_of_image> and <end_of_image>; image tokens attend to each other both ways
// (token_type_ids). Takes no video.
#include "family.h"

#include "headroom/vision.h"

#include <cmath>

namespace headroom {

namespace {
nlohmann::json textDefaults()
{
    return {{"vocab_size", 262208},
            {"hidden_size", 2304},
            {"intermediate_size", 9216},
            {"num_hidden_layers", 26},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"attention_bias", false},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"sliding_window_pattern", 6},
            {"tie_word_embeddings", true}};
}

void outer(const ConfigFields &c, ModelArch &m)
{
    const nlohmann::json &vj = vision_params::visionConfig(c, m);
    const ConfigFields v(vj, "config.vision_config");
    auto &vs = m.vision;
    vs.towerParams = vision_params::siglip(vj, "config.vision_config", m.vision.tower);
    const int64_t H = v.integer("hidden_size", 768);
    vs.projectorParams = checkedAdd(checkedMul(H, m.hiddenSize), H);
    vs.tokens = ModelArch::VisionSide::Tokens::Fixed;
    vs.patch = v.integer("patch_size", 16);
    vs.imageSize = v.integer("image_size", 224);
    vs.tokensPerImage = c.integer("mm_tokens_per_image", 256);
    const int64_t side = vs.imageSize / vs.patch, pooled = static_cast<int64_t>(std::llround(std::sqrt(double(vs.tokensPerImage))));
    if (pooled * pooled != vs.tokensPerImage || pooled > side || side % pooled != 0)
        c.refuse("mm_tokens_per_image", std::to_string(vs.tokensPerImage),
                 "must be a square whose side divides the tower's " + std::to_string(side) + " patches a side");
    vs.markers = 2; // <start_of_image>, <end_of_image>
}
} // namespace

const Family &family_gemma3()
{
    static const Family f = family_gemma3_text()
                                .visionLanguage("gemma3", &outer)
                                .defaults(&textDefaults)
                                .set(&FamilyTraits::visionTowerSimulated);
    return f;
}

} // namespace headroom
