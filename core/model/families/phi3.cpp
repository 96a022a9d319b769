// modeling_phi3.py: Llama with fused qkv_proj and gate_up_proj (no biases; Phi3Attention makes o_proj
// before qkv_proj), partial rotary
// (partial_rotary_factor) concatenated with the rest, and embedding, residual and attention
// dropout.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = m.mlpBias = false;
    m.fusedQkv = m.fusedGateUp = true;
    m.rotaryFraction = c.number("partial_rotary_factor", 1.0);
    m.embdDropout = c.number("embd_pdrop", 0.0);
    m.residDropout = c.number("resid_pdrop", 0.0);
    m.attnDropout = c.number("attention_dropout", 0.0);
}
} // namespace

const Family &family_phi3()
{
    static const Family f = family_llama()
                                .derive("phi3")
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::outProjRegisteredFirst)
                                .reads(&read);
    return f;
}

} // namespace headroom
