// modular_olmoe.py: Llama with q_norm/k_norm over the whole q and k projections (LlamaRMSNorm) and
// Mixtral's sparse MoE block in every layer: softmax top-k renormalised only by norm_topk_prob,
// experts as wide as intermediate_size.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integer("num_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = m.intermediateSize;
}
} // namespace

const Family &family_olmoe()
{
    static const Family f = family_llama().derive("olmoe").with(QkNorm::Projection).reads(&read);
    return f;
}

} // namespace headroom
