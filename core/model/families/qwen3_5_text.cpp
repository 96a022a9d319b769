// modular_qwen3_5.py (Qwen3_5ForCausalLM over a Qwen3_5TextConfig): Qwen3 with a hybrid stack.
// The layers config.layer_types names "linear_attention" (three of every four by default) mix
// tokens through the gated DeltaNet (Note [Gated DeltaNet]); the others run Qwen3's attention
// with an output gate (q_proj twice as wide, `attn_output * sigmoid(gate)` before o_proj) and
// partial rotary (partial_rotary_factor 0.25) concatenated with the rest inside
// apply_rotary_pos_emb. Every RMSNorm is Qwen3_5RMSNorm: `x.float()` normalised, times
// `1 + weight.float()`, cast back (Gemma's). The rotary tables are multimodal (three position
// rows, recomposed per mrope_section).
#include "family.h"

#include "headroom/json_input.h"

#include <string>

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = c.boolean("attention_bias", false);
    // Qwen3_5TextConfig: partial_rotary_factor at the top level (its __post_init__ default) or in
    // rope_parameters.
    const nlohmann::json &j = c.json();
    double fraction = 0.25;
    if (j.contains("rope_parameters") && j.at("rope_parameters").is_object())
        fraction = ConfigFields(j.at("rope_parameters"), "config.rope_parameters").number("partial_rotary_factor", fraction);
    m.rotaryFraction = c.number("partial_rotary_factor", fraction);
    ModelArch::LinearAttention &la = m.linearAttn;
    la.keyHeads = c.integer("linear_num_key_heads", 16);
    la.valueHeads = c.integer("linear_num_value_heads", 32);
    la.keyDim = c.integer("linear_key_head_dim", 128);
    la.valueDim = c.integer("linear_value_head_dim", 128);
    la.convKernel = c.integer("linear_conv_kernel_dim", 4);
    if (la.valueHeads % la.keyHeads != 0)
        c.refuse("linear_num_value_heads", std::to_string(la.valueHeads),
                 "must be a multiple of linear_num_key_heads (" + std::to_string(la.keyHeads) + ")");
    for (auto [key, v] : {std::pair{"linear_num_key_heads", la.keyHeads}, {"linear_num_value_heads", la.valueHeads},
                          {"linear_key_head_dim", la.keyDim}, {"linear_value_head_dim", la.valueDim},
                          {"linear_conv_kernel_dim", la.convKernel}})
        if (v > (int64_t(1) << 16))
            c.refuse(key, std::to_string(v), "is implausibly large (limit 65536)");
    // layer_types, or every full_attention_interval-th layer full (Qwen3_5TextConfig.__post_init__).
    if (m.numLayers > (int64_t(1) << 24)) // before a flag per layer is made (ModelArch::validate's limit)
        c.refuse("num_hidden_layers", std::to_string(m.numLayers), "is implausibly large (limit 16777216)");
    m.linearLayers.assign(static_cast<size_t>(m.numLayers), false);
    if (c.has("layer_types")) {
        const nlohmann::json &lt = j.at("layer_types");
        if (!lt.is_array() || lt.size() < static_cast<size_t>(m.numLayers))
            c.refuse("layer_types", showJson(lt).substr(0, 40),
                     "must list a type for each of the " + std::to_string(m.numLayers) + " layers");
        for (int64_t l = 0; l < m.numLayers; ++l) {
            const nlohmann::json &t = lt.at(static_cast<size_t>(l));
            const std::string type = t.is_string() ? t.get<std::string>() : "";
            if (type == "linear_attention")
                m.linearLayers[static_cast<size_t>(l)] = true;
            else if (type != "full_attention")
                c.refuse("layer_types", showJson(t).substr(0, 40),
                         "each entry must be \"linear_attention\" or \"full_attention\"");
        }
    } else {
        const int64_t every = c.integer("full_attention_interval", 4);
        for (int64_t l = 0; l < m.numLayers; ++l)
            m.linearLayers[static_cast<size_t>(l)] = (l + 1) % every != 0;
    }
}
} // namespace

const Family &family_qwen3_5_text()
{
    static const Family f = family_qwen3()
                                .derive("qwen3_5_text")
                                .with(RmsNormStyle::Gemma)
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::rotaryCatAfterPair)
                                .set(&FamilyTraits::rotaryCatRebinds)
                                .set(&FamilyTraits::attentionOutputGate)
                                .set(&FamilyTraits::multimodalRotaryTables)
                                .reads(&read);
    return f;
}

} // namespace headroom
