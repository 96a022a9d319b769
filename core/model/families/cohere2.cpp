// modular_cohere2.py: Cohere with sliding-window layers from layer_types, and no rotary on its
// full-attention layers when sliding_window is set.
#include "family.h"

namespace headroom {

const Family &family_cohere2()
{
    static const Family f = family_cohere()
                                .derive("cohere2")
                                .set(&FamilyTraits::slidingLayerTypes)
                                .set(&FamilyTraits::noRotaryOnFullLayers);
    return f;
}

} // namespace headroom
