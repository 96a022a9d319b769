// modeling_olmo2.py: q_norm/k_norm over the whole projections, norms after attention and the MLP
// only, Olmo2RMSNorm's (weight * x).to(dtype), and rotary cos/sin left in fp32.
#include "family.h"

namespace headroom {

const Family &family_olmo2()
{
    static const Family f = family_llama()
                                .derive("olmo2")
                                .with(NormPlacement::Post)
                                .with(QkNorm::Projection)
                                .with(RmsNormStyle::Olmo)
                                .set(&FamilyTraits::rotaryFp32);
    return f;
}

} // namespace headroom
