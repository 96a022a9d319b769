// modular_granite.py: Llama with four scalars from the config, each a multiply or divide by a Python
// float: the embedding (embedding_multiplier), each residual branch before its add
// (residual_multiplier), the attention's scaling (attention_multiplier: SDPA's scale, no memory) and
// the logits (logits_scaling).
#include "family.h"

namespace headroom {

const Family &family_granite()
{
    static const Family f = family_llama()
                                .derive("granite")
                                .set(&FamilyTraits::embeddingTimesScalar)
                                .set(&FamilyTraits::residualBranchScaled)
                                .set(&FamilyTraits::logitsScaledByScalar);
    return f;
}

} // namespace headroom
