// modular_qwen3_5.py: Qwen3.5's checkpoints (Qwen/Qwen3.5-9B, -27B) are a qwen3_5 config.json with a
// text_config and a vision_config, and Qwen3_5ForConditionalGeneration (what its `architectures`
// names, and what LLaMA-Factory, TRL and Axolotl's processor recipes build) is Qwen3-VL's tower
// without deepstack over the hybrid language model (qwen3_5_text), its features scattered into the
// image and video placeholders with Qwen2-VL's get_rope_index positions (issue 30). The text model
// alone (AutoModelForCausalLM: Qwen3_5ForCausalLM, which skips `model.visual` on load) is
// qwen3_5_text, the presets' qwen3.5-9b; their -vl presets are this build (Note [Vision build]).
#include "family.h"

#include "headroom/vision.h"

namespace headroom {

namespace {
void outer(const ConfigFields &c, ModelArch &m)
{
    vision_params::qwen3(vision_params::visionConfig(c, m), m.hiddenSize, m.vision, "config.vision_config", false);
    // Qwen3-VL's processors (the checkpoints ship Qwen3VLProcessor's bounds)
    m.vision.perFrameVideo = true;
    m.vision.minPixels = 65536;
    m.vision.maxPixels = 16777216;
    m.vision.videoMinPixels = 4096;
    m.vision.videoMaxPixels = 25165824;
}
} // namespace

const Family &family_qwen3_5()
{
    static const Family f =
        family_qwen3_5_text().visionLanguage("qwen3_5", &outer).set(&FamilyTraits::visionTowerSimulated);
    return f;
}

} // namespace headroom
