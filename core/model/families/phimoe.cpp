// modular_phimoe.py: Mixtral with nn.LayerNorm (with biases), attention_bias and lm_head_bias from
// the config, and the sparsemixer router. The router's tensors are tokens x experts (scores, its
// threshold masks, Gumbel samples, softmax, the custom multiplier's saved state): they are followed
// as Mixtral's router's, not op by op. On the H200 step that is exact for peak allocated in every
// phase and +0.64% for reserved (their small-pool blocks; tokens x experts is 32 KiB there, 256 KiB
// for Phi-3.5-MoE at 8k tokens).
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.norm = NormKind::LayerNorm;
    m.qkvBias = m.oBias = c.boolean("attention_bias", false);
    m.lmHeadBias = c.boolean("lm_head_bias", false);
}
} // namespace

const Family &family_phimoe()
{
    static const Family f = family_mixtral().derive("phimoe").reads(&read);
    return f;
}

} // namespace headroom
