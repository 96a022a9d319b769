// modular_qwen3.py: Qwen2 with RMSNorm on q and k per head, and attention_bias (q, k, v and o)
// from the config.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = c.boolean("attention_bias", false);
}
} // namespace

const Family &family_qwen3()
{
    static const Family f =
        family_qwen2().derive("qwen3").set(&FamilyTraits::libtorchEngine).with(QkNorm::PerHead).reads(&read);
    return f;
}

} // namespace headroom
