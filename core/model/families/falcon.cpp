// modeling_falcon.py (Falcon-7B's architecture): a root of its own. One LayerNorm per layer feeding
// attention and the MLP in parallel, a fused query_key_value of the query heads plus one key and
// one value head (multi-query), the key and value taken by index (copies), Llama's rotary, SDPA
// handed the materialised causal mask (so the math path, in fp32, for the unequal head counts:
// Note [SDPA math path in fp32]), FalconLinear (`x @ W.T`, then `+ bias`), a plain GELU MLP
// (dense_h_to_4h, dense_4h_to_h), and `mlp_output += attention_output; residual + mlp_output`.
// Falcon-40B/180B's new decoder architecture, ALiBi, and the sequential residual are variants the
// row does not follow: they are traced.
#include "family.h"

#include <string>

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    // FalconConfig's fields, or the names older Falcon config.json files use, or the defaults.
    auto aliased = [&](const char *key, const char *old, int64_t fallback) {
        return c.has(key) || !c.has(old) ? c.integer(key, fallback) : c.integer(old);
    };
    m.hiddenSize = aliased("hidden_size", "n_embed", 4544);
    m.numLayers = aliased("num_hidden_layers", "n_layer", 32);
    m.numHeads = aliased("num_attention_heads", "n_head", 71);
    m.vocabSize = c.integer("vocab_size", 65024);
    m.maxPositions = c.integer("max_position_embeddings", 2048);
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", true);
    m.intermediateSize = c.has("ffn_hidden_size") ? c.integer("ffn_hidden_size") : checkedMul(4, m.hiddenSize);
    m.activation = c.string("activation", "gelu");
    m.norm = NormKind::LayerNorm;
    m.normsPerLayer = 1;
    m.mlp = MlpKind::Plain;
    m.fusedQkv = true;
    m.parallelResidual = true;
    m.qkvBias = m.oBias = m.mlpBias = c.boolean("bias", false);
    m.attnDropout = c.number("attention_dropout", 0.0);
    m.residDropout = c.number("hidden_dropout", 0.0);
    const bool newArch = c.boolean("new_decoder_architecture", false);
    const bool multiQuery = c.boolean("multi_query", true);
    m.numKvHeads = newArch ? c.integer("num_kv_heads", m.numHeads) : multiQuery ? 1 : m.numHeads;
    if (newArch)
        ConfigFields::notModelled(m, "new_decoder_architecture", "true",
                                  "Falcon-40B's new decoder architecture (two layer norms, key and value broadcast to "
                                  "every head)");
    else if (!multiQuery)
        ConfigFields::notModelled(m, "multi_query", "false", "Falcon's multi-head variant");
    if (c.boolean("alibi", false))
        ConfigFields::notModelled(m, "alibi", "true", "ALiBi position biases");
    if (!c.boolean("parallel_attn", true))
        ConfigFields::notModelled(m, "parallel_attn", "false", "Falcon's sequential residual");
    if (m.attnDropout > 0 || m.residDropout > 0)
        ConfigFields::notModelled(m, "hidden_dropout", "> 0", "Falcon's dropout");
}
} // namespace

const Family &family_falcon()
{
    static const Family f = Family::root("falcon")
                                .with(FusedQkvLayout::IndexedKv)
                                .set(&FamilyTraits::parallelSharedNorm)
                                .set(&FamilyTraits::parallelSumInPlace)
                                .set(&FamilyTraits::sdpaExplicitMask)
                                .set(&FamilyTraits::eagerNotModelled)
                                .assign(&FamilyTraits::qkvName, std::string_view("query_key_value"))
                                .assign(&FamilyTraits::oName, std::string_view("dense"))
                                .assign(&FamilyTraits::upName, std::string_view("dense_h_to_4h"))
                                .assign(&FamilyTraits::downName, std::string_view("dense_4h_to_h"))
                                .reads(&read);
    return f;
}

} // namespace headroom
