// modular_olmoe.py: Llama with q_norm/k_norm over the whole q and k projections (LlamaRMSNorm) and
// Mixtral's sparse MoE block in every layer: softmax top-k renormalised only by norm_topk_prob,
// experts as wide as intermediate_size. Transformers 5.x stacks the experts as Qwen3-MoE does, and
// PEFT wraps them (Note [Experts ParamWrapper]): all-linear put 7 adapters in each layer, 9,273,856
// trainable parameters at the lab's small size, exactly the wrappers' shapes plus q/k/v/o and the
// router (tests/data/h200/traced-2026-12-04, olmoe-lora; estimated as attention-only it was 16.6%
// under).
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integerEither("num_experts", "num_local_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = m.intermediateSize;
}
} // namespace

const Family &family_olmoe()
{
    static const Family f = family_llama()
                                .derive("olmoe")
                                .with(QkNorm::Projection)
                                .set(&FamilyTraits::expertsWrappedByPeft)
                                .reads(&read);
    return f;
}

} // namespace headroom
