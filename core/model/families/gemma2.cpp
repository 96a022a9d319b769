// modular_gemma2.py: Gemma with sandwich norms (before and after attention and the MLP), a
// sliding window on every other layer, and final_logit_softcapping.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    const nlohmann::json &j = c.json();
    if (j.contains("final_logit_softcapping") && j.at("final_logit_softcapping").is_number())
        m.finalLogitSoftcap = j.at("final_logit_softcapping").get<double>();
}
} // namespace

const Family &family_gemma2()
{
    static const Family f = family_gemma()
                                .derive("gemma2")
                                .with(NormPlacement::Sandwich)
                                .set(&FamilyTraits::slidingEveryOtherLayer)
                                .reads(&read);
    return f;
}

} // namespace headroom
