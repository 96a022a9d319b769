// modeling_llava.py (LlavaForConditionalGeneration, built whole by AutoModelForImageTextToText;
// issue 30): a CLIP tower at a fixed image_size whose features at vision_feature_layer go through
// the projector (Linear, GELU, Linear) into a Llama language model, from a text_config that states
// only what differs from LlamaConfig's defaults. Each image is (image_size / patch_size)^2 tokens
// (one more with vision_feature_select_strategy "full"). Takes no video. A text model other than
// Llama's is not this row's (ModelArch::rowGap).
#include "family.h"

#include "headroom/vision.h"

namespace headroom {

namespace {
nlohmann::json textDefaults()
{
    return {{"model_type", "llama"},
            {"vocab_size", 32000},
            {"hidden_size", 4096},
            {"intermediate_size", 11008},
            {"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"hidden_act", "silu"},
            {"max_position_embeddings", 2048},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", false}};
}

void outer(const ConfigFields &c, ModelArch &m)
{
    const nlohmann::json &j = c.json();
    const bool nested = j.contains("text_config") && j.at("text_config").is_object();
    const std::string text = nested && j.at("text_config").contains("model_type") &&
                                     j.at("text_config").at("model_type").is_string()
                                 ? j.at("text_config").at("model_type").get<std::string>()
                                 : "llama";
    if (text != "llama")
        ConfigFields::notModelled(m, "text_config.model_type", text, "a LLaVA language model other than Llama's");
    const nlohmann::json &vj = vision_params::visionConfig(c, m);
    const ConfigFields v(vj, "config.vision_config");
    auto &vs = m.vision;
    vs.towerParams = vision_params::clip(vj, "config.vision_config", m.vision.tower);
    const int64_t H = v.integer("hidden_size", 768), T = m.hiddenSize;
    const bool bias = c.boolean("multimodal_projector_bias", true);
    // vision_feature_layer: one hidden state, or several concatenated (the projector's input
    // that many times as wide); negative counts from the end of the depth + 1 hidden states
    auto &t = m.vision.tower;
    const auto layerIndex = [&](const nlohmann::json &x) {
        const int64_t n = t.depth + 1;
        if (!x.is_number_integer() || x.get<int64_t>() < -n || x.get<int64_t>() >= n)
            c.refuse("vision_feature_layer", x.dump().substr(0, 40),
                     "must index the tower's " + std::to_string(n) + " hidden states");
        const int64_t i = x.get<int64_t>();
        return i < 0 ? i + n : i;
    };
    const nlohmann::json layers = j.contains("vision_feature_layer") ? j.at("vision_feature_layer") : nlohmann::json(-2);
    if (layers.is_array()) {
        if (layers.empty() || layers.size() > 64)
            c.refuse("vision_feature_layer", layers.dump().substr(0, 40), "must name one to 64 hidden states");
        for (const auto &x : layers)
            t.featureLayers.push_back(layerIndex(x));
    } else
        t.featureLayers.push_back(layerIndex(layers));
    const int64_t in = checkedMul(H, static_cast<int64_t>(t.featureLayers.size()));
    vs.projectorParams = checkedAdd(checkedMul(in, T) + (bias ? T : 0), checkedMul(T, T) + (bias ? T : 0));
    vs.tokens = ModelArch::VisionSide::Tokens::Fixed;
    vs.patch = v.integer("patch_size", 16);
    vs.imageSize = v.integer("image_size", 224);
    const std::string strategy = c.string("vision_feature_select_strategy", "default");
    if (strategy != "default" && strategy != "full")
        c.refuse("vision_feature_select_strategy", strategy, "must be default or full");
    vs.tokensPerImage = (vs.imageSize / vs.patch) * (vs.imageSize / vs.patch) + (strategy == "full" ? 1 : 0);
    t.dropCls = strategy != "full";
    t.projectorBias = bias;
    t.projectorGelu = c.string("projector_hidden_act", "gelu");
    vs.markers = 0;
}
} // namespace

const Family &family_llava()
{
    static const Family f = family_llama()
                                .visionLanguage("llava", &outer)
                                .defaults(&textDefaults)
                                .set(&FamilyTraits::visionTowerSimulated);
    return f;
}

} // namespace headroom
