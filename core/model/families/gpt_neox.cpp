// modeling_gpt_neox.py: LayerNorm, a fused query_key_value split per head, partial rotary
// (rotary_pct) concatenated with the rest, a plain GELU MLP (dense_h_to_4h, dense_4h_to_h), the
// parallel residual, and attention and hidden dropout.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = c.boolean("attention_bias", true);
    m.mlpBias = true;
    m.mlp = MlpKind::Plain;
    m.norm = NormKind::LayerNorm;
    m.activation = c.string("hidden_act", "gelu");
    m.fusedQkv = true;
    m.parallelResidual = c.boolean("use_parallel_residual", true);
    m.rotaryFraction = c.number("rotary_pct", 0.25);
    m.attnDropout = c.number("attention_dropout", 0.0);
    m.residDropout = c.number("hidden_dropout", 0.0);
}
} // namespace

const Family &family_gpt_neox()
{
    static const Family f = family_llama()
                                .derive("gpt_neox")
                                .with(FusedQkvLayout::PerHeadChunks)
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::rotaryCatAfterPair)
                                .set(&FamilyTraits::rotaryCatRebinds)
                                .set(&FamilyTraits::normRegisteredFirst)
                                .assign(&FamilyTraits::qkvName, std::string_view("query_key_value"))
                                .assign(&FamilyTraits::oName, std::string_view("dense"))
                                .assign(&FamilyTraits::upName, std::string_view("dense_h_to_4h"))
                                .assign(&FamilyTraits::downName, std::string_view("dense_4h_to_h"))
                                .reads(&read);
    return f;
}

} // namespace headroom
