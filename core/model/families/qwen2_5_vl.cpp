// modular_qwen2_5_vl.py (Qwen2_5_VLForConditionalGeneration, built whole by
// AutoModelForImageTextToText; issue 30): a Qwen2 decoder whose rotary is multimodal (three
// position rows per token, the tables recomposed per mrope_section in every attention), the
// vision tower (Qwen2_5_VisionTransformerPretrainedModel: windowed and full-attention blocks) and
// its merger. The Hub's config.json states the language model at the top level (the legacy form
// Transformers still reads), a newer one in text_config. The checkpoint processor's bounds are
// Qwen2.5-VL's preprocessor_config.json (min_pixels 3136, max_pixels 12845056, images and video).
#include "family.h"

#include "headroom/vision.h"

namespace headroom {

namespace {
void outer(const ConfigFields &c, ModelArch &m)
{
    vision_params::qwen25(vision_params::visionConfig(c, m), m.hiddenSize, m.vision, "config.vision_config");
    m.vision.minPixels = m.vision.videoMinPixels = 3136;
    m.vision.maxPixels = m.vision.videoMaxPixels = 12845056;
}
} // namespace

const Family &family_qwen2_5_vl()
{
    static const Family f =
        family_qwen2()
            .visionLanguage("qwen2_5_vl", &outer)
            .set(&FamilyTraits::visionTowerSimulated)
            .set(&FamilyTraits::multimodalRotaryTables)
            .set(&FamilyTraits::multimodalRotaryHalves);
    return f;
}

} // namespace headroom
