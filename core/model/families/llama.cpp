// modeling_llama.py: the root most families derive from. Pre-norm RMSNorm decoder layers, rotary
// on all of head_dim, a gated SiLU MLP; attention_bias and mlp_bias from the config.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.hiddenSize = c.integer("hidden_size");
    m.numLayers = c.integer("num_hidden_layers");
    m.numHeads = c.integer("num_attention_heads");
    m.numKvHeads = c.integer("num_key_value_heads", m.numHeads);
    // Required, but for configurations whose every MLP is an MoE block beside a shared expert
    // (Qwen3.5-MoE has no intermediate_size): the family reads its widths.
    m.intermediateSize = !c.has("intermediate_size") && c.has("shared_expert_intermediate_size")
                             ? 0
                             : c.integer("intermediate_size");
    m.vocabSize = c.integer("vocab_size");
    m.maxPositions = c.integer("max_position_embeddings", 2048);
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", false);
    m.activation = c.string("hidden_act", "silu");
    m.qkvBias = m.oBias = c.boolean("attention_bias", false);
    m.mlpBias = c.boolean("mlp_bias", false);
}
} // namespace

const Family &family_llama()
{
    static const Family f = Family::root("llama").set(&FamilyTraits::libtorchEngine).reads(&read);
    return f;
}

} // namespace headroom
