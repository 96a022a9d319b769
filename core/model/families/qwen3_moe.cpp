// modular_qwen3_moe.py: Qwen3 with a sparse MoE block in every layer, its experts registered
// before the router, and stacked experts that PEFT's LoRA wraps (ParamWrapper).
#include "family.h"

#include "headroom/json_input.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integerEither("num_experts", "num_local_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = c.integer("moe_intermediate_size");
    const nlohmann::json &j = c.json();
    const bool everyLayer =
        c.integer("decoder_sparse_step", 1) == 1 && (!j.contains("mlp_only_layers") || j.at("mlp_only_layers").empty());
    if (!everyLayer)
        c.refuse("mlp_only_layers", showJson(j.contains("mlp_only_layers") ? j.at("mlp_only_layers") : nlohmann::json::array()).substr(0, 40),
                 "dense layers between sparse ones are not supported yet");
}
} // namespace

const Family &family_qwen3_moe()
{
    static const Family f = family_qwen3()
                                .derive("qwen3_moe")
                                .set(&FamilyTraits::expertsBeforeRouter)
                                .set(&FamilyTraits::expertsWrappedByPeft)
                                .reads(&read);
    return f;
}

} // namespace headroom
