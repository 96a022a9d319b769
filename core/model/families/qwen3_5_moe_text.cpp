// modular_qwen3_5_moe.py (Qwen3_5MoeForCausalLM over a Qwen3_5MoeTextConfig): Qwen3.5's hybrid
// stack with Qwen3-Next's sparse MoE block in every layer: the shared expert first, then the
// router (softmax in fp32, top-k, always renormalised, cast back), the stacked experts (grouped_mm),
// and sigmoid(shared_expert_gate(x)) times the shared expert's output added to theirs.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integerEither("num_experts", "num_local_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = c.integer("moe_intermediate_size");
    m.sharedExpertIntermediateSize = c.integer("shared_expert_intermediate_size");
    m.sharedExpertGate = true;
    m.intermediateSize = m.sharedExpertIntermediateSize; // Qwen3_5MoeTextConfig has no intermediate_size
}
} // namespace

const Family &family_qwen3_5_moe_text()
{
    static const Family f = family_qwen3_5_text()
                                .derive("qwen3_5_moe_text")
                                .set(&FamilyTraits::topkRenormalized)
                                .reads(&read);
    return f;
}

} // namespace headroom
