// modular_gemma3.py (Gemma3ForCausalLM): Gemma 2's sandwich norms, its embedding scale a buffer,
// Gemma3RMSNorm on q and k per head after all three projections, sliding-window layers by
// layer_types (every 6th global by default) with their own (local) rotary table.
#include "family.h"

namespace headroom {

const Family &family_gemma3_text()
{
    static const Family f = family_gemma2()
                                .derive("gemma3_text")
                                .with(QkNorm::PerHead)
                                .unset(&FamilyTraits::slidingEveryOtherLayer)
                                .set(&FamilyTraits::embedScaleBuffer)
                                .set(&FamilyTraits::slidingLayerTypes)
                                .assign(&FamilyTraits::slidingPatternDefault, 6)
                                .set(&FamilyTraits::qkNormAfterProjections)
                                .set(&FamilyTraits::localRotary);
    return f;
}

} // namespace headroom
