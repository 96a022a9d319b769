// modeling_stablelm.py: Llama's layout with nn.LayerNorm, q/k/v biases from use_qkv_bias, partial
// rotary (partial_rotary_factor) concatenated with the rest, an optional parallel residual, and
// hidden (residual) and attention dropout. Its per-head q/k LayerNorms (qk_layernorm) are refused.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.norm = NormKind::LayerNorm;
    m.qkvBias = c.boolean("use_qkv_bias", false);
    m.oBias = m.mlpBias = false;
    m.rotaryFraction = c.number("partial_rotary_factor", 0.25);
    m.parallelResidual = c.boolean("use_parallel_residual", false);
    m.residDropout = c.number("hidden_dropout", 0.0);
    m.attnDropout = c.number("attention_dropout", 0.0);
    if (c.boolean("qk_layernorm", false))
        c.refuse("qk_layernorm", "true", "StableLM's per-head q/k LayerNorms are not modelled yet (the traced estimate follows them)");
}
} // namespace

const Family &family_stablelm()
{
    static const Family f = family_llama()
                                .derive("stablelm")
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::rotaryCatAfterPair)
                                .reads(&read);
    return f;
}

} // namespace headroom
