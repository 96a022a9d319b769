// Qwen3.5-MoE's checkpoints (Qwen/Qwen3.5-35B-A3B, -122B-A10B): a qwen3_5_moe config.json whose
// Qwen3_5MoeForConditionalGeneration is Qwen3.5's vision side (qwen3_5.cpp) over the MoE language
// model (qwen3_5_moe_text, what AutoModelForCausalLM builds alone).
#include "family.h"

namespace headroom {

const Family &family_qwen3_5_moe()
{
    static const Family f = family_qwen3_5_moe_text()
                                .visionLanguage("qwen3_5_moe", family_qwen3_5().outer)
                                .set(&FamilyTraits::visionTowerSimulated);
    return f;
}

} // namespace headroom
