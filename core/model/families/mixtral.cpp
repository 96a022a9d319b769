// modular_mixtral.py: Mistral with a sparse MoE block in every layer; experts as wide as
// intermediate_size; the router's top-k weights always renormalised.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.numExperts = c.integerEither("num_local_experts", "num_experts");
    m.expertsPerToken = c.integer("num_experts_per_tok");
    m.expertIntermediateSize = m.intermediateSize;
}
} // namespace

const Family &family_mixtral()
{
    static const Family f = family_mistral().derive("mixtral").set(&FamilyTraits::topkAlwaysNormalized).reads(&read);
    return f;
}

} // namespace headroom
