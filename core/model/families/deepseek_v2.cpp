// modeling_deepseek_v2.py: multi-head latent attention (q through q_proj or q_a/q_b, k and v from
// a compressed kv_a projection) with complex rotary, first_k_dense_replace dense layers, then MoE
// layers with an fp32 router (softmax top-k) and shared experts added after the routed ones.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    const nlohmann::json &j = c.json();
    m.kvLoraRank = c.integer("kv_lora_rank");
    m.qLoraRank = j.contains("q_lora_rank") && j.at("q_lora_rank").is_null() ? 0 : c.integer("q_lora_rank", 0);
    m.qkNopeDim = c.integer("qk_nope_head_dim");
    m.qkRopeDim = c.integer("qk_rope_head_dim");
    m.vHeadDim = c.integer("v_head_dim");
    m.numExperts = c.integer("n_routed_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = c.integer("moe_intermediate_size");
    const int64_t shared =
        j.contains("n_shared_experts") && j.at("n_shared_experts").is_null() ? 0 : c.integer("n_shared_experts", 0);
    m.sharedExpertIntermediateSize = checkedMul(m.expertIntermediateSize, shared);
    m.firstDenseLayers = c.integer("first_k_dense_replace", 0);
    if (const int64_t freq = c.integer("moe_layer_freq", 1); freq != 1)
        c.refuse("moe_layer_freq", std::to_string(freq),
                 "dense layers between sparse ones are not supported yet");
    if (m.firstDenseLayers < 0 || m.firstDenseLayers > m.numLayers)
        c.refuse("first_k_dense_replace", std::to_string(m.firstDenseLayers),
                 "must be between 0 and num_hidden_layers");
}
} // namespace

const Family &family_deepseek_v2()
{
    static const Family f = family_llama()
                                .derive("deepseek_v2")
                                .set(&FamilyTraits::expertsBeforeRouter)
                                .set(&FamilyTraits::expertsWrappedByPeft)
                                .set(&FamilyTraits::fp32Router)
                                .set(&FamilyTraits::sharedExpertsAfter)
                                .set(&FamilyTraits::complexRotary)
                                .reads(&read);
    return f;
}

} // namespace headroom
