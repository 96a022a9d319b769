// modular_cohere.py (Command R): one CohereLayerNorm per layer (no bias, written in fp32 Python)
// feeding attention and the MLP in parallel (residual + attn + mlp), interleaved rotary computed in
// fp32, logits * logit_scale. Its per-head q/k LayerNorms (use_qk_norm) are refused. Measured
// through cohere2, which adds only its sliding layers to this.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.normsPerLayer = 1;
    m.parallelResidual = true;
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", true);
    if (c.boolean("use_qk_norm", false))
        c.refuse("use_qk_norm", "true", "Cohere's per-head q/k LayerNorms are not modelled yet (the traced estimate follows them)");
}
} // namespace

const Family &family_cohere()
{
    static const Family f = family_llama()
                                .derive("cohere")
                                .set(&FamilyTraits::meanCentredNormFp32)
                                .set(&FamilyTraits::rotaryInterleaved)
                                .set(&FamilyTraits::rotaryInterleavedTables)
                                .set(&FamilyTraits::parallelSharedNorm)
                                .set(&FamilyTraits::logitsScaledByScalar)
                                .reads(&read);
    return f;
}

} // namespace headroom
