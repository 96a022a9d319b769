// modeling_gemma.py: Llama with GemmaRMSNorm (x * (1 + weight) in fp32), the embedding scaled by
// sqrt(hidden_size), tied embeddings by default and hidden_activation (gelu_pytorch_tanh).
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", true);
    m.activation = c.string("hidden_activation", "gelu_pytorch_tanh");
}
} // namespace

const Family &family_gemma()
{
    static const Family f =
        family_llama().derive("gemma").with(RmsNormStyle::Gemma).set(&FamilyTraits::scaledEmbedding).reads(&read);
    return f;
}

} // namespace headroom
