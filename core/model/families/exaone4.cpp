// modular_exaone4.py: OLMo 2's decoder layer (norms after attention and the MLP only) with Llama's
// RMSNorm and MLP, q_norm/k_norm per head once q, k and v are projected, sliding-window layers
// from layer_types, and no rotary on the full-attention layers when sliding_window is set.
#include "family.h"

namespace headroom {

const Family &family_exaone4()
{
    static const Family f = family_llama()
                                .derive("exaone4")
                                .with(NormPlacement::Post)
                                .with(QkNorm::PerHead)
                                .set(&FamilyTraits::qkNormAfterProjections)
                                .set(&FamilyTraits::slidingLayerTypes)
                                .set(&FamilyTraits::noRotaryOnFullLayers);
    return f;
}

} // namespace headroom
