// modular_smollm3.py: Llama whose attention turns q and k only on the layers config.no_rope_layers
// marks 1 (NoPE every no_rope_layer_interval-th layer, 4 by default), with sliding windows on the
// layers layer_types names when use_sliding_window is set (off in the released checkpoints).
#include "family.h"

namespace headroom {

const Family &family_smollm3()
{
    static const Family f = family_llama()
                                .derive("smollm3")
                                .set(&FamilyTraits::noRopeLayersListed)
                                .set(&FamilyTraits::slidingLayerTypes)
                                .set(&FamilyTraits::slidingWindowOptIn);
    return f;
}

} // namespace headroom
