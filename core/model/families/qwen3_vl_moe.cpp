// modular_qwen3_vl_moe.py (Qwen3VLMoeForConditionalGeneration; issue 30): Qwen3-VL's vision side
// (qwen3_vl.cpp: the tower, deepstack into the first decoder layers, the interleaved multimodal
// rotary) over a Qwen3-MoE decoder.
#include "family.h"

namespace headroom {

const Family &family_qwen3_vl_moe()
{
    static const Family f = family_qwen3_moe()
                                .visionLanguage("qwen3_vl_moe", family_qwen3_vl().outer)
                                .set(&FamilyTraits::visionTowerSimulated)
                                .set(&FamilyTraits::multimodalRotaryTables);
    return f;
}

} // namespace headroom
