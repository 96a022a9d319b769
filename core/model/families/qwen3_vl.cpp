// modular_qwen3_vl.py (Qwen3VLForConditionalGeneration, built whole by AutoModelForImageTextToText;
// issue 30): a Qwen3 decoder with interleaved multimodal rotary and deepstack (the tower's features
// at deepstack_visual_indexes added to the first decoder layers' outputs), the vision tower
// (Qwen3VLVisionModel: learned positions, LayerNorm blocks) and its mergers. Each temporal patch of
// a video is its own vision_start ... vision_end block, after its timestamp. The checkpoint
// processor's bounds: size.shortest_edge 65536 / longest_edge 16777216 (images), 4096 / 25165824
// (video_preprocessor_config.json).
#include "family.h"

#include "headroom/vision.h"

namespace headroom {

namespace {
void outer(const ConfigFields &c, ModelArch &m)
{
    vision_params::qwen3(vision_params::visionConfig(c, m), m.hiddenSize, m.vision, "config.vision_config");
    m.vision.perFrameVideo = true;
    m.vision.minPixels = 65536;
    m.vision.maxPixels = 16777216;
    m.vision.videoMinPixels = 4096;
    m.vision.videoMaxPixels = 25165824;
}
} // namespace

const Family &family_qwen3_vl()
{
    static const Family f = family_qwen3()
                                .visionLanguage("qwen3_vl", &outer)
                                .set(&FamilyTraits::visionTowerSimulated)
                                .set(&FamilyTraits::multimodalRotaryTables);
    return f;
}

} // namespace headroom
