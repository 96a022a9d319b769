// modular_qwen3_vl_moe.py (Qwen3VLMoeForConditionalGeneration; issue 30): Qwen3-VL's vision side
// (qwen3_vl.cpp: the tower, deepstack into the first decoder layers, the interleaved multimodal
// rotary) over a Qwen3-MoE decoder whose stacked experts PEFT does not wrap.
#include "family.h"

namespace headroom {

const Family &family_qwen3_vl_moe()
{
    static const Family f = family_qwen3_moe()
                                .visionLanguage("qwen3_vl_moe", family_qwen3_vl().outer)
                                .set(&FamilyTraits::visionTowerSimulated)
                                .set(&FamilyTraits::multimodalRotaryTables)
                                // PEFT 0.21 wraps Qwen3-MoE's stacked experts for gate/up/down_proj,
                                // not Qwen3VLMoeTextExperts': LoRA adapts the attention only (the
                                // engine's 16 modules on 4 layers, tests/data/h200/vl4-2026-12-06)
                                .unset(&FamilyTraits::expertsWrappedByPeft);
    return f;
}

} // namespace headroom
