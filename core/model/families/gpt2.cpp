// modeling_gpt2.py: a root of its own. Learned positions (wpe), LayerNorm, transformers' Conv1D
// instead of nn.Linear (c_attn split into q, k and v; c_proj; c_fc), gelu_new, dropout on the
// embedding, attention and residual; its eager attention keeps the scores' dtype for softmax.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.hiddenSize = c.integer("n_embd");
    m.numLayers = c.integer("n_layer");
    m.numHeads = c.integer("n_head");
    m.numKvHeads = m.numHeads;
    m.intermediateSize = c.integer("n_inner", 4 * m.hiddenSize);
    m.vocabSize = c.integer("vocab_size");
    m.maxPositions = c.integer("n_positions", 1024);
    m.learnedPositions = true;
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", true);
    m.mlp = MlpKind::Plain;
    m.norm = NormKind::LayerNorm;
    m.qkvBias = m.oBias = m.mlpBias = true;
    m.activation = c.string("activation_function", "gelu_new");
    m.fusedQkv = true;
    m.embdDropout = c.number("embd_pdrop", 0.1);
    m.attnDropout = c.number("attn_pdrop", 0.1);
    m.residDropout = c.number("resid_pdrop", 0.1);
}
} // namespace

const Family &family_gpt2()
{
    static const Family f = Family::root("gpt2")
                                .with(FusedQkvLayout::SplitColumns)
                                .set(&FamilyTraits::normRegisteredFirst)
                                .set(&FamilyTraits::normOutputKept)
                                .set(&FamilyTraits::conv1dLinears)
                                .set(&FamilyTraits::eagerSoftmaxInDtype)
                                .assign(&FamilyTraits::qkvName, std::string_view("c_attn"))
                                .assign(&FamilyTraits::oName, std::string_view("c_proj"))
                                .assign(&FamilyTraits::upName, std::string_view("c_fc"))
                                .assign(&FamilyTraits::downName, std::string_view("c_proj"))
                                .reads(&read);
    return f;
}

} // namespace headroom
