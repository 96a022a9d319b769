// modeling_phi.py (Phi-1, 1.5, 2): one LayerNorm per layer whose output feeds attention and the MLP
// in parallel (attn + mlp + residual), biased q/k/v and dense, partial rotary whose cat follows
// both q and k, a plain fc1/fc2 MLP (gelu_new), embedding and residual dropout, and an lm_head with
// a bias. Its per-head q/k LayerNorms (qk_layernorm) are refused.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.norm = NormKind::LayerNorm;
    m.normsPerLayer = 1;
    m.parallelResidual = true;
    m.mlp = MlpKind::Plain;
    m.qkvBias = m.oBias = m.mlpBias = true;
    m.lmHeadBias = true;
    m.activation = c.string("hidden_act", "gelu_new");
    m.rotaryFraction = c.number("partial_rotary_factor", 0.5);
    m.embdDropout = c.number("embd_pdrop", 0.0);
    m.residDropout = c.number("resid_pdrop", 0.0);
    m.attnDropout = c.number("attention_dropout", 0.0);
    if (c.boolean("qk_layernorm", false))
        c.refuse("qk_layernorm", "true", "Phi's per-head q/k LayerNorms are not modelled yet (the traced estimate follows them)");
}
} // namespace

const Family &family_phi()
{
    static const Family f = family_llama()
                                .derive("phi")
                                .set(&FamilyTraits::rotaryConcat)
                                .set(&FamilyTraits::rotaryCatAfterPair)
                                .set(&FamilyTraits::parallelSharedNorm)
                                .assign(&FamilyTraits::oName, std::string_view("dense"))
                                .assign(&FamilyTraits::upName, std::string_view("fc1"))
                                .assign(&FamilyTraits::downName, std::string_view("fc2"))
                                .reads(&read);
    return f;
}

} // namespace headroom
