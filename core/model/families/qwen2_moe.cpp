// modular_qwen2_moe.py: Qwen2 with a sparse MoE block (top-k renormalised by norm_topk_prob) and
// a gated shared expert beside the routed ones.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integerEither("num_experts", "num_local_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = c.integer("moe_intermediate_size");
    m.sharedExpertIntermediateSize = c.integer("shared_expert_intermediate_size", 0);
    m.sharedExpertGate = m.sharedExpertIntermediateSize > 0;
}
} // namespace

const Family &family_qwen2_moe()
{
    static const Family f = family_qwen2().derive("qwen2_moe").reads(&read);
    return f;
}

} // namespace headroom
