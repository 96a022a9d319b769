// modular_glm4.py: GLM's attention (q, k, v biases from attention_bias, none on o_proj; rotary on
// the first partial_rotary_factor of each head with the interleaved tables and rotate_half of
// apply_rotary_pos_emb, each of q and k then concatenated with its pass-through features), Phi-3's
// fused gate_up_proj MLP, and sandwich norms: post_self_attn_layernorm after attention and
// post_mlp_layernorm after the MLP.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = c.boolean("attention_bias", true);
    m.oBias = m.mlpBias = false;
    m.fusedGateUp = true;
    double fraction = 0.5; // Glm4Config's default
    const nlohmann::json &j = c.json();
    if (j.contains("rope_parameters") && j.at("rope_parameters").is_object())
        fraction = ConfigFields(j.at("rope_parameters"), "config.rope_parameters").number("partial_rotary_factor", fraction);
    m.rotaryFraction = c.number("partial_rotary_factor", fraction);
}
} // namespace

const Family &family_glm4()
{
    static const Family f = family_llama()
                                .derive("glm4")
                                .with(NormPlacement::Sandwich)
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::rotaryCatAfterPair)
                                .set(&FamilyTraits::rotaryInterleaved)
                                .reads(&read);
    return f;
}

} // namespace headroom
