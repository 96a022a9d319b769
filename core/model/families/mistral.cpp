// modular_mistral.py: Llama with bias=False hard-coded on every projection; its sliding_window
// applies whenever the config sets one.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &, ModelArch &m)
{
    m.qkvBias = m.oBias = m.mlpBias = false;
}
} // namespace

const Family &family_mistral()
{
    static const Family f = family_llama().derive("mistral").set(&FamilyTraits::libtorchEngine).reads(&read);
    return f;
}

} // namespace headroom
