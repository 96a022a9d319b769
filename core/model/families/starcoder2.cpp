// modular_starcoder2.py: Mistral's attention with use_bias on every projection, nn.LayerNorm, a
// plain c_fc/c_proj MLP, and embedding, residual and attention dropout.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = m.mlpBias = c.boolean("use_bias", true);
    m.mlp = MlpKind::Plain;
    m.norm = NormKind::LayerNorm;
    m.activation = c.string("hidden_act", "gelu_pytorch_tanh");
    m.embdDropout = c.number("embedding_dropout", 0.0);
    m.residDropout = c.number("residual_dropout", 0.0);
    m.attnDropout = c.number("attention_dropout", 0.0);
}
} // namespace

const Family &family_starcoder2()
{
    static const Family f = family_mistral()
                                .derive("starcoder2")
                                .assign(&FamilyTraits::upName, std::string_view("c_fc"))
                                .assign(&FamilyTraits::downName, std::string_view("c_proj"))
                                .reads(&read);
    return f;
}

} // namespace headroom
