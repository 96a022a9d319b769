// modular_deepseek_v3.py: DeepSeek-V2 with interleaved real rotary and sigmoid routing with a
// correction bias (noaux_tc).
#include "family.h"

namespace headroom {

const Family &family_deepseek_v3()
{
    static const Family f = family_deepseek_v2()
                                .derive("deepseek_v3")
                                .unset(&FamilyTraits::complexRotary)
                                .set(&FamilyTraits::sigmoidRouter);
    return f;
}

} // namespace headroom
