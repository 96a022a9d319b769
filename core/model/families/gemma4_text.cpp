// modular_gemma4.py (Gemma4ForCausalLM over a Gemma4TextConfig), by difference from Gemma 3
// (Note [Gemma 4], docs/estimator.md):
// - Gemma4RMSNorm: `x * pow(mean(x^2) + eps, -0.5)` in fp32, times `weight.float()` (not
//   1 + weight), cast back; the values' v_norm has no weight;
// - the attention normalises and turns q before k and v are projected, then k, then v_norm;
//   the global (full-attention) layers have their own head size and kv heads (global_head_dim,
//   num_global_key_value_heads, or per_layer_config), and with attention_k_eq_v no v_proj (the
//   values are k_proj's output); the last layer is global whatever layer_types says;
// - per-layer inputs (hidden_size_per_layer_input > 0): an embedding of
//   vocab_size_per_layer_input x (layers x width) and the embeddings' projection, combined once,
//   then in every layer a gate, its product with the layer's slice, a projection, a norm and a
//   residual add;
// - every layer ends with `hidden_states *= layer_scalar` (a buffer, in place).
// - the last num_kv_shared_layers layers reuse the keys and values the last earlier layer of their
//   kind stored (no k_proj, v_proj or their norms), their MLP twice as wide with use_double_wide_mlp.
// Not followed yet, so traced (ModelArch::rowGap): the MoE block beside the MLP
// (enable_moe_block), bidirectional attention over every token.
#include "family.h"

#include "headroom/json_input.h"

#include <algorithm>
#include <string>

namespace headroom {

namespace {
using nlohmann::json;

// A non-negative integer field (hidden_size_per_layer_input is 0 on models without per-layer inputs).
int64_t nonNegative(const ConfigFields &c, const std::string &key, int64_t fallback)
{
    if (!c.has(key))
        return fallback;
    const json &v = c.json().at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t(1) << 24))
        c.refuse(key, showJson(v).substr(0, 40), "must be an integer between 0 and 16777216");
    return v.get<int64_t>();
}

// layer_types, or every 6th layer global (sliding_window_pattern); the last layer global always.
void readLayerKinds(const ConfigFields &c, ModelArch &m)
{
    if (m.numLayers > (int64_t(1) << 24))
        c.refuse("num_hidden_layers", std::to_string(m.numLayers), "is implausibly large (limit 16777216)");
    m.globalLayers.assign(static_cast<size_t>(m.numLayers), false);
    if (c.has("layer_types")) {
        const json &lt = c.json().at("layer_types");
        if (!lt.is_array() || lt.size() < static_cast<size_t>(m.numLayers))
            c.refuse("layer_types", showJson(lt).substr(0, 40),
                     "must list a type for each of the " + std::to_string(m.numLayers) + " layers");
        for (int64_t l = 0; l < m.numLayers; ++l) {
            const json &t = lt.at(static_cast<size_t>(l));
            const std::string type = t.is_string() ? t.get<std::string>() : "";
            if (type != "sliding_attention" && type != "full_attention")
                c.refuse("layer_types", showJson(t).substr(0, 40),
                         "each entry must be \"sliding_attention\" or \"full_attention\"");
            m.globalLayers[static_cast<size_t>(l)] = type == "full_attention";
        }
    } else {
        const int64_t every = c.integer("sliding_window_pattern", 6);
        for (int64_t l = 0; l < m.numLayers; ++l)
            m.globalLayers[static_cast<size_t>(l)] = (l + 1) % every == 0;
    }
    if (m.numLayers > 0)
        m.globalLayers.back() = true;
}

// The global layers' geometry: per_layer_config as Transformers 5.15+ writes it ({"<layer>":
// {"head_dim": .., "num_key_value_heads": ..}} for the layers that differ), else the flat
// global_head_dim (512 unless given) and, with attention_k_eq_v, num_global_key_value_heads.
void readGlobalGeometry(const ConfigFields &c, ModelArch &m)
{
    m.globalKeyIsValue = c.boolean("attention_k_eq_v", false);
    if (!c.has("per_layer_config")) {
        m.globalHeadDim = c.integer("global_head_dim", 512);
        m.globalKvHeads = m.globalKeyIsValue ? c.integer("num_global_key_value_heads", m.numKvHeads) : m.numKvHeads;
        return;
    }
    const json &plc = c.json().at("per_layer_config");
    if (!plc.is_object())
        c.refuse("per_layer_config", showJson(plc).substr(0, 40), "must be an object of per-layer overrides");
    int64_t headDim = 0, kvHeads = 0;
    bool first = true;
    for (int64_t l = 0; l < m.numLayers; ++l) {
        const std::string key = std::to_string(l);
        const bool global = m.globalLayers[static_cast<size_t>(l)];
        const json none = json::object();
        const json &o = plc.contains(key) ? plc.at(key) : none;
        if (!o.is_object())
            c.refuse("per_layer_config", key, "each override must be an object");
        for (const auto &[k, v] : o.items())
            if (k != "head_dim" && k != "num_key_value_heads")
                ConfigFields::notModelled(m, "per_layer_config." + key + "." + k, showJson(v).substr(0, 40),
                                          "per-layer overrides other than head_dim and num_key_value_heads");
        const ConfigFields f(o, "config.per_layer_config." + key);
        const int64_t d = f.integer("head_dim", m.headDim), kv = f.integer("num_key_value_heads", m.numKvHeads);
        if (!global) {
            if (d != m.headDim || kv != m.numKvHeads)
                ConfigFields::notModelled(m, "per_layer_config." + key, showJson(o).substr(0, 40),
                                          "a sliding layer with its own head size or kv heads");
            continue;
        }
        if (first) {
            headDim = d;
            kvHeads = kv;
            first = false;
        } else if (d != headDim || kv != kvHeads) {
            ConfigFields::notModelled(m, "per_layer_config." + key, showJson(o).substr(0, 40),
                                      "global layers of more than one head size or kv head count");
        }
    }
    m.globalHeadDim = first ? m.headDim : headDim;
    m.globalKvHeads = first ? m.numKvHeads : kvHeads;
}

void read(const ConfigFields &c, ModelArch &m)
{
    readLayerKinds(c, m);
    readGlobalGeometry(c, m);
    for (auto [key, v] : {std::pair{"global_head_dim", m.globalHeadDim}, {"num_global_key_value_heads", m.globalKvHeads}})
        if (v > (int64_t(1) << 16))
            c.refuse(key, std::to_string(v), "is implausibly large (limit 65536)");
    if (m.numHeads % m.globalKvHeads != 0)
        c.refuse("num_global_key_value_heads", std::to_string(m.globalKvHeads),
                 "must divide num_attention_heads (" + std::to_string(m.numHeads) + ")");
    m.perLayerInputSize = nonNegative(c, "hidden_size_per_layer_input", 256);
    if (m.perLayerInputSize > 0)
        m.perLayerVocab = c.integer("vocab_size_per_layer_input", 262144);
    if (m.perLayerInputSize > (int64_t(1) << 16) || m.perLayerVocab > (int64_t(1) << 24))
        c.refuse("hidden_size_per_layer_input", std::to_string(m.perLayerInputSize),
                 "is implausibly large with vocab_size_per_layer_input " + std::to_string(m.perLayerVocab));
    m.kvSharedLayers = nonNegative(c, "num_kv_shared_layers", 0);
    m.doubleWideMlp = c.boolean("use_double_wide_mlp", false);
    if (m.kvSharedLayers > 0) {
        // Each sharing layer reads the last earlier layer of its kind (store_full_length_kv).
        const int64_t first = m.numLayers - m.kvSharedLayers;
        bool kinds[2] = {false, false};
        for (int64_t l = 0; l < first; ++l)
            kinds[m.globalLayers[static_cast<size_t>(l)] ? 1 : 0] = true;
        for (int64_t l = std::max<int64_t>(first, 0); l < m.numLayers; ++l)
            if (first <= 0 || !kinds[m.globalLayers[static_cast<size_t>(l)] ? 1 : 0])
                c.refuse("num_kv_shared_layers", std::to_string(m.kvSharedLayers),
                         "leaves a sharing layer with no earlier layer of its kind to share keys and values with");
    }
    if (c.boolean("enable_moe_block", false))
        ConfigFields::notModelled(m, "enable_moe_block", "true", "the MoE block beside the MLP");
    if (c.has("use_bidirectional_attention") && c.json().at("use_bidirectional_attention") == "all")
        ConfigFields::notModelled(m, "use_bidirectional_attention", "all", "bidirectional attention over every token");
}
} // namespace

const Family &family_gemma4_text()
{
    static const Family f = family_gemma3_text()
                                .derive("gemma4_text")
                                .with(RmsNormStyle::Gemma4)
                                .set(&FamilyTraits::valueNorm)
                                .set(&FamilyTraits::layerScalar)
                                .reads(&read);
    return f;
}

} // namespace headroom
