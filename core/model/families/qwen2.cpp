// modular_qwen2.py: Llama with bias=True hard-coded on q, k and v (none on o_proj or the MLP);
// sliding_window only with use_sliding_window.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &, ModelArch &m)
{
    m.qkvBias = true;
    m.oBias = m.mlpBias = false;
}
} // namespace

const Family &family_qwen2()
{
    static const Family f = family_llama()
                                .derive("qwen2")
                                .set(&FamilyTraits::libtorchEngine)
                                .set(&FamilyTraits::slidingWindowOptIn)
                                .reads(&read);
    return f;
}

} // namespace headroom
