// Qwen3.5-MoE's checkpoints (Qwen/Qwen3.5-35B-A3B, -122B-A10B): a qwen3_5_moe config.json with a
// vision_config and a text_config, built by AutoModelForCausalLM as Qwen3_5MoeForCausalLM from its
// text_config alone (qwen3_5.cpp says why); the row is qwen3_5_moe_text's.
#include "family.h"

namespace headroom {

const Family &family_qwen3_5_moe()
{
    static const Family f = family_qwen3_5_moe_text()
                                .derive("qwen3_5_moe")
                                .set(&FamilyTraits::textConfigNested)
                                .readsOuter(family_qwen3_5().outer); // the same vision tower
    return f;
}

} // namespace headroom
