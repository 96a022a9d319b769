// modular_ernie4_5.py: Llama with GLM's interleaved rotary computed in fp32 (its rotary tables are
// left fp32, and q and k are cast back after), and use_bias on every projection.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = m.mlpBias = c.boolean("use_bias", false);
}
} // namespace

const Family &family_ernie4_5()
{
    static const Family f = family_llama()
                                .derive("ernie4_5")
                                .set(&FamilyTraits::rotaryFp32)
                                .set(&FamilyTraits::rotaryInterleaved)
                                .reads(&read);
    return f;
}

} // namespace headroom
