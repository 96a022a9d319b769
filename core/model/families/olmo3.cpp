// modular_olmo3.py: OLMo 2 with sliding-window layers by layer_types; its rotary casts cos/sin to
// x's dtype.
#include "family.h"

namespace headroom {

const Family &family_olmo3()
{
    static const Family f =
        family_olmo2().derive("olmo3").unset(&FamilyTraits::rotaryFp32).set(&FamilyTraits::slidingLayerTypes);
    return f;
}

} // namespace headroom
