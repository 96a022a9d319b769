#include "headroom/model.h"

#include "family.h"

#include "headroom/error.h"
#include "headroom/json_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <fstream>
#include <map>

namespace headroom {

using nlohmann::json;

namespace {

std::string show(const json &v) { return showJson(v); }
int64_t requireInt(const json &c, const std::string &key, const std::string &ctx)
{
    if (!c.contains(key) || c.at(key).is_null())
        throw InputError(ctx + "." + key, "(missing)", "required field is missing");
    const json &v = c.at(key);
    // A size in a config.json: a whole number in [1, 2^40]. Checked before any arithmetic, so a
    // derived size (GPT-2's n_inner = 4 n_embd) cannot overflow, and the message names the
    // file's own field; 2^64 - 1 and 1e23 are too large, not "not positive" (issue 32, row 15).
    constexpr int64_t kMaxConfigInt = int64_t(1) << 40;
    const bool whole = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                 v.get<double>() == std::floor(v.get<double>()));
    if (!whole)
        throw InputError(ctx + "." + key, show(v), "must be a whole number");
    const bool tooLarge = (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxConfigInt)) ||
                          (v.is_number_float() && v.get<double>() > double(kMaxConfigInt)) ||
                          (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() > kMaxConfigInt);
    if (tooLarge)
        throw InputError(ctx + "." + key, show(v), "must be at most 2^40 (1099511627776)");
    const auto n = v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
    if (n <= 0)
        throw InputError(ctx + "." + key, show(v), "must be positive");
    return n;
}

int64_t optionalInt(const json &c, const std::string &key, int64_t fallback, const std::string &ctx)
{
    if (!c.contains(key) || c.at(key).is_null())
        return fallback;
    return requireInt(c, key, ctx);
}

bool optionalBool(const json &c, const std::string &key, bool fallback, const std::string &ctx)
{
    if (!c.contains(key) || c.at(key).is_null())
        return fallback;
    if (!c.at(key).is_boolean())
        throw InputError(ctx + "." + key, show(c.at(key)), "must be true or false");
    return c.at(key).get<bool>();
}

double optionalDouble(const json &c, const std::string &key, double fallback, const std::string &ctx)
{
    if (!c.contains(key) || c.at(key).is_null())
        return fallback;
    if (!c.at(key).is_number())
        throw InputError(ctx + "." + key, show(c.at(key)), "must be a number");
    return c.at(key).get<double>();
}

std::string optionalString(const json &c, const std::string &key, const std::string &fallback, const std::string &ctx)
{
    if (!c.contains(key) || c.at(key).is_null())
        return fallback;
    if (!c.at(key).is_string())
        throw InputError(ctx + "." + key, show(c.at(key)), "must be a string");
    return boundedName(c.at(key).get<std::string>());
}

// How many tensors an activation function saves for backward, in units of its input.
// SiLU, GELU and gelu_pytorch_tanh are single ATen ops that save their input; HF's gelu_new
// (NewGELUActivation) is written as Python ops: pow saves x, tanh saves its output, and the
// final product saves both its factors.
int activationSaved(const std::string &act)
{
    if (act == "gelu_new" || act == "gelu_fast")
        return 4;
    if (act == "relu2") // relu's result, kept by relu and by square
        return 1;
    return 1;
}

} // namespace

int64_t ConfigFields::integer(const std::string &key) const { return requireInt(m_c, key, m_ctx); }
int64_t ConfigFields::integer(const std::string &key, int64_t fallback) const
{
    return optionalInt(m_c, key, fallback, m_ctx);
}
bool ConfigFields::boolean(const std::string &key, bool fallback) const
{
    return optionalBool(m_c, key, fallback, m_ctx);
}
double ConfigFields::number(const std::string &key, double fallback) const
{
    return optionalDouble(m_c, key, fallback, m_ctx);
}
std::string ConfigFields::string(const std::string &key, const std::string &fallback) const
{
    return optionalString(m_c, key, fallback, m_ctx);
}
void ConfigFields::refuse(const std::string &key, const std::string &value, const std::string &why) const
{
    throw InputError(m_ctx + "." + key, value, why);
}

namespace {

// Every family, one per file in families/ (families.inc is generated from that folder's files).
const std::vector<const Family *> &families()
{
    static const std::vector<const Family *> all = {
#define HEADROOM_FAMILY(name) &family_##name(),
#include "families.inc"
#undef HEADROOM_FAMILY
    };
    return all;
}

const Family *findFamily(std::string_view modelType)
{
    for (const Family *f : families())
        if (f->traits.modelType == modelType)
            return f;
    return nullptr;
}

} // namespace

const FamilyTraits &familyTraitsOrLlama(std::string_view modelType)
{
    const Family *f = findFamily(modelType);
    return f ? f->traits : family_llama().traits;
}

const FamilyTraits &familyTraits(std::string_view modelType)
{
    if (const Family *f = findFamily(modelType))
        return f->traits;
    std::string list;
    for (const std::string &t : supportedModelTypes())
        list += (list.empty() ? "" : ", ") + t;
    throw InputError("config.model_type", std::string(modelType), "unsupported model type (supported: " + list + ")");
}

std::vector<std::string> supportedModelTypes()
{
    std::vector<std::string> out;
    for (const Family *f : families())
        out.emplace_back(f->traits.modelType);
    return out;
}

void ModelArch::validate() const
{
    if (!estimable)
        throw InputError("model.model_type", modelType,
                         "Headroom cannot estimate this model type yet (its measurements still load and show)");
    auto positive = [&](const char *field, int64_t v) {
        if (v <= 0)
            throw InputError(std::string("model.") + field, std::to_string(v), "must be positive");
    };
    positive("hidden_size", hiddenSize);
    positive("num_hidden_layers", numLayers);
    positive("num_attention_heads", numHeads);
    positive("num_key_value_heads", numKvHeads);
    positive("head_dim", headDim);
    positive("intermediate_size", intermediateSize);
    positive("vocab_size", vocabSize);
    if (numHeads % numKvHeads != 0)
        throw InputError("model.num_key_value_heads", std::to_string(numKvHeads),
                         "must divide num_attention_heads (" + std::to_string(numHeads) + ")");
    const int64_t limit = int64_t(1) << 24;
    for (auto [f, v] : {std::pair{"hidden_size", hiddenSize}, {"intermediate_size", intermediateSize},
                        {"num_hidden_layers", numLayers}, {"vocab_size", vocabSize}}) {
        if (v > limit)
            throw InputError(std::string("model.") + f, std::to_string(v), "is implausibly large (limit 16777216)");
    }
    // Every other size that multiplies into a tensor's element count: bounded so that no product
    // of them can wrap (issue 15: head_dim 2^62 reported 6.7 B parameters for an 8 B model).
    for (auto [f, v, lim] : {std::tuple{"head_dim", headDim, int64_t(1) << 16},
                             {"num_attention_heads", numHeads, int64_t(1) << 16},
                             {"num_key_value_heads", numKvHeads, int64_t(1) << 16},
                             {"max_position_embeddings", maxPositions, int64_t(1) << 24},
                             {"num_experts", numExperts, int64_t(1) << 16},
                             {"moe_intermediate_size", expertIntermediateSize, int64_t(1) << 24},
                             {"shared_expert_intermediate_size", sharedExpertIntermediateSize, int64_t(1) << 24},
                             {"first_dense_layers", firstDenseLayers, numLayers},
                             {"q_lora_rank", qLoraRank, int64_t(1) << 20},
                             {"kv_lora_rank", kvLoraRank, int64_t(1) << 20},
                             {"qk_nope_head_dim", qkNopeDim, int64_t(1) << 16},
                             {"qk_rope_head_dim", qkRopeDim, int64_t(1) << 16},
                             {"v_head_dim", vHeadDim, int64_t(1) << 16}}) {
        if (v < 0)
            throw InputError(std::string("model.") + f, std::to_string(v), "must not be negative");
        if (v > lim)
            throw InputError(std::string("model.") + f, std::to_string(v),
                             "is implausibly large (limit " + std::to_string(lim) + ")");
    }
    const int64_t params = parameterCount(*this);
    if (params > int64_t(100000000000000)) // 10^14
        throw InputError("model", std::to_string(params) + " parameters",
                         "is implausibly large (limit 10^14 parameters)");
    for (auto [f, v] : {std::pair{"embd_dropout", embdDropout}, {"attn_dropout", attnDropout}, {"resid_dropout", residDropout}})
        if (!(v >= 0.0 && v < 1.0))
            throw InputError(std::string("model.") + f, std::to_string(v), "must be at least 0 and below 1");
    if (!(rotaryFraction > 0.0 && rotaryFraction <= 1.0))
        throw InputError("model.rotary_fraction", std::to_string(rotaryFraction), "must be above 0 and at most 1");
    if (isMla() && (qkNopeDim <= 0 || qkRopeDim <= 0 || qkRopeDim % 2 != 0 || vHeadDim <= 0))
        throw InputError("model.qk_rope_head_dim", std::to_string(qkRopeDim),
                         "multi-head latent attention needs positive qk_nope_head_dim and v_head_dim and an even "
                         "qk_rope_head_dim");
    if (isMoe() && (expertsPerToken <= 0 || expertsPerToken > numExperts))
        throw InputError("model.num_experts_per_tok", std::to_string(expertsPerToken),
                         "must be between 1 and the number of experts (" + std::to_string(numExperts) + ")");
}


ModelArch modelFromHfConfig(const json &c, const std::string &id)
{
    const std::string ctx = "config";
    if (!c.is_object())
        throw InputError(ctx, show(c).substr(0, 40), "a Hugging Face config.json must be a JSON object");
    if (!c.contains("model_type"))
        throw InputError("config.model_type", "(missing)", "required field is missing");
    ModelArch m;
    m.modelType = optionalString(c, "model_type", "", ctx);
    m.id = id;
    m.name = id;
    const FamilyTraits &traits = familyTraits(m.modelType);
    // A composite configuration's text model reads its text_config (FamilyTraits::textConfigNested).
    if (traits.textConfigNested && (!c.contains("text_config") || !c.at("text_config").is_object()))
        throw InputError("config.text_config", c.contains("text_config") ? show(c.at("text_config")).substr(0, 40) : "(missing)",
                         "a " + m.modelType + " config.json holds its language model's sizes in a text_config object");
    const json &tc = traits.textConfigNested ? c.at("text_config") : c;
    const std::string tctx = traits.textConfigNested ? "config.text_config" : ctx;
    const Family &family = *findFamily(m.modelType); // familyTraits() above refused a type with none
    family.readConfig(ConfigFields(tc, tctx), m);
    if (family.outer)
        family.outer(ConfigFields(c, ctx), m); // a composite's own fields (Family::outer)
    m.qkNorm = traits.qkNorm != QkNorm::None;
    if (traits.norms == NormPlacement::Sandwich)
        m.normsPerLayer = 4;
    m.headDim = optionalInt(tc, "head_dim", 0, tctx);
    if (m.isMla())
        m.headDim = m.qkRopeDim; // DeepseekV2Config: head_dim is the rotary part (the rotary tables' width)
    if (m.headDim == 0) {
        if (m.hiddenSize % m.numHeads != 0)
            throw InputError("config.num_attention_heads", std::to_string(m.numHeads),
                             "does not divide hidden_size (" + std::to_string(m.hiddenSize) + ") and no head_dim is given");
        m.headDim = m.hiddenSize / m.numHeads;
    }
    m.activationSavedTensors = activationSaved(m.activation);
    m.hfConfig = c;
    m.validate();
    return m;
}

ModelArch modelFromHfConfigFile(const std::string &path)
{
    const json j = readJsonFile(path, "model");
    // A Headroom preset wraps the HF config; a plain config.json is the config itself.
    if (j.is_object() && j.contains("config") && j.contains("headroom"))
        return modelArchFromJson(j);
    ModelArch m = modelFromHfConfig(j, path);
    return m;
}

std::vector<ParamTensor> parameterInventory(const ModelArch &m)
{
    std::vector<ParamTensor> p;
    const int64_t h = m.hiddenSize, L = m.numLayers, d = m.headDim;
    const int64_t qOut = m.numHeads * d, kvOut = m.numKvHeads * d;
    const int64_t normTensors = m.norm == NormKind::LayerNorm ? 2 : 1; // weight (+ bias)
    // Hybrid models (Qwen3.5): attention's tensors on the attention layers only, the gated DeltaNet's
    // on the others (Note [Gated DeltaNet]).
    const int64_t Lin = m.linearAttentionLayerCount(), La = L - Lin;
    const FamilyTraits &ft = familyTraitsOrLlama(m.modelType);
    const int64_t qRows = ft.attentionOutputGate ? 2 * qOut : qOut;
    auto add = [&](std::string module, int64_t rows, int64_t cols, int64_t count, bool linear = false) {
        p.push_back({std::move(module), rows, cols, count, linear});
    };
    add("embed_tokens", m.vocabSize, h, 1);
    if (m.learnedPositions)
        add("embed_positions", m.maxPositions, h, 1);
    if (m.isMla()) {
        // DeepseekV2Attention: q_proj (or q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa,
        // kv_a_layernorm, kv_b_proj, o_proj.
        const int64_t H = m.numHeads, qk = m.qkNopeDim + m.qkRopeDim;
        if (m.qLoraRank > 0) {
            add("q_a_proj", m.qLoraRank, h, L);
            add("q_a_layernorm", m.qLoraRank, 1, L);
            add("q_b_proj", H * qk, m.qLoraRank, L);
        } else {
            add("q_proj", H * qk, h, L, true);
        }
        add("kv_a_proj_with_mqa", m.kvLoraRank + m.qkRopeDim, h, L);
        add("kv_a_layernorm", m.kvLoraRank, 1, L);
        add("kv_b_proj", H * (m.qkNopeDim + m.vHeadDim), m.kvLoraRank, L);
        add("o_proj", h, H * m.vHeadDim, L, true);
        if (m.oBias) {
            add("kv_a_proj_with_mqa.bias", m.kvLoraRank + m.qkRopeDim, 1, L);
            add("o_proj.bias", h, 1, L);
            if (m.qLoraRank > 0)
                add("q_a_proj.bias", m.qLoraRank, 1, L);
        }
    } else if (m.fusedQkv) {
        add("qkv_proj", qOut + 2 * kvOut, h, La, true);
        if (m.qkvBias)
            add("qkv_proj.bias", qOut + 2 * kvOut, 1, La);
    } else {
        add("q_proj", qRows, h, La, true);
        add("k_proj", kvOut, h, La, true);
        add("v_proj", kvOut, h, La, true);
        if (m.qkvBias) {
            add("q_proj.bias", qRows, 1, La);
            add("k_proj.bias", kvOut, 1, La);
            add("v_proj.bias", kvOut, 1, La);
        }
    }
    if (!m.isMla()) {
        add("o_proj", h, qOut, La, true);
        if (m.oBias)
            add("o_proj.bias", h, 1, La);
    }
    if (ft.attentionSinks)
        add("self_attn.sinks", m.numHeads, 1, La);
    if (m.qkNorm) {
        const bool projection = ft.qkNorm == QkNorm::Projection;
        add("q_norm", projection ? qOut : d, 1, La);
        add("k_norm", projection ? kvOut : d, 1, La);
    }
    if (Lin > 0) { // Qwen3_5GatedDeltaNet's parameters, in registration order
        const ModelArch::LinearAttention &la = m.linearAttn;
        add("linear_attn.dt_bias", la.valueHeads, 1, Lin);
        add("linear_attn.A_log", la.valueHeads, 1, Lin);
        add("linear_attn.conv1d", la.convWidth(), la.convKernel, Lin);
        add("linear_attn.norm", la.valueDim, 1, Lin);
        add("linear_attn.out_proj", h, la.valueWidth(), Lin, true);
        add("linear_attn.in_proj_qkv", la.convWidth(), h, Lin, true);
        add("linear_attn.in_proj_z", la.valueWidth(), h, Lin, true);
        add("linear_attn.in_proj_b", la.valueHeads, h, Lin, true);
        add("linear_attn.in_proj_a", la.valueHeads, h, Lin, true);
    }
    if (m.isMoe()) {
        const int64_t E = m.numExperts, Ie = m.expertIntermediateSize, Lm = L - m.firstDenseLayers;
        add("router", E, h, Lm);
        // transformers 5 stacks the experts: [E, 2 x Ie, h] gate_up_proj and [E, h, Ie] down_proj
        // Parameters, not Linear modules.
        add("experts.gate_up_proj", E * 2 * Ie, h, Lm);
        add("experts.down_proj", E * h, Ie, Lm);
        if (ft.gptOssExperts) { // GPT-OSS: the router's bias and each expert's two biases
            add("router.bias", E, 1, Lm);
            add("experts.gate_up_proj_bias", E, 2 * Ie, Lm);
            add("experts.down_proj_bias", E, h, Lm);
        }
        if (m.sharedExpertIntermediateSize > 0) {
            const int64_t Is = m.sharedExpertIntermediateSize;
            add("shared_expert.gate_proj", Is, h, Lm, true);
            add("shared_expert.up_proj", Is, h, Lm, true);
            add("shared_expert.down_proj", h, Is, Lm, true);
        }
        if (m.sharedExpertGate)
            add("shared_expert_gate", 1, h, Lm);
        if (m.firstDenseLayers > 0) { // DeepSeek's first_k_dense_replace layers: a dense MLP
            const int64_t I = m.intermediateSize, Ld = m.firstDenseLayers;
            add("dense.gate_proj", I, h, Ld);
            add("dense.up_proj", I, h, Ld);
            add("dense.down_proj", h, I, Ld);
        }
    } else {
        const int64_t I = m.intermediateSize;
        if (m.fusedGateUp)
            add("gate_up_proj", 2 * I, h, L, true);
        else if (m.mlp == MlpKind::Gated)
            add("gate_proj", I, h, L, true);
        if (!m.fusedGateUp)
            add("up_proj", I, h, L, true);
        add("down_proj", h, I, L, true);
        if (m.mlpBias) {
            if (m.mlp == MlpKind::Gated)
                add("gate_proj.bias", I, 1, L);
            add("up_proj.bias", I, 1, L);
            add("down_proj.bias", h, 1, L);
        }
    }
    add("layer_norms", h, 1, L * m.normsPerLayer * normTensors);
    add("final_norm", h, 1, normTensors);
    if (!m.tiedEmbeddings)
        add("lm_head", m.vocabSize, h, 1);
    if (m.lmHeadBias)
        add("lm_head.bias", m.vocabSize, 1, 1);
    return p;
}

std::array<std::string, kLinearModuleCount> linearModuleNames(const ModelArch &m)
{
    using M = LinearModule;
    std::array<std::string, kLinearModuleCount> n;
    auto set = [&](M mod, std::string_view name) { n[static_cast<size_t>(mod)] = std::string(name); };
    const FamilyTraits &ft = familyTraitsOrLlama(m.modelType);
    if (m.isMla()) {
        if (m.qLoraRank == 0)
            set(M::Q, "q_proj"); // kv_a_proj_with_mqa and kv_b_proj match no k_proj/v_proj target
    } else if (m.fusedQkv) {
        set(M::Q, ft.qkvName);
    } else {
        set(M::Q, "q_proj");
        set(M::K, "k_proj");
        set(M::V, "v_proj");
    }
    set(M::O, ft.oName);
    // An MoE layer's only MLP Linears are its shared expert's (Qwen2-MoE).
    if (m.isMoe() && m.sharedExpertIntermediateSize <= 0)
        return n;
    if (m.fusedGateUp) {
        set(M::Gate, "gate_up_proj");
    } else {
        if (m.mlp == MlpKind::Gated)
            set(M::Gate, "gate_proj");
        set(M::Up, ft.upName);
    }
    set(M::Down, ft.downName);
    return n;
}

std::array<bool, kLinearModuleCount> loraAdaptedModules(const ModelArch &m, const std::vector<std::string> &targets)
{
    (void)loraTargetMask(targets); // every name must be one Headroom knows
    const auto names = linearModuleNames(m);
    std::array<bool, kLinearModuleCount> on{};
    const bool wrapsExperts = expertsLora(m, targets).any();
    for (size_t i = 0; i < names.size(); ++i) {
        const auto mod = static_cast<LinearModule>(i);
        if (wrapsExperts && (mod == LinearModule::Gate || mod == LinearModule::Up || mod == LinearModule::Down))
            continue; // PEFT puts these targets on the stacked experts (expertsLora)
        for (const auto &t : targets)
            if (!names[i].empty() && (t == names[i] || t == "all-linear"))
                on[i] = true;
    }
    return on;
}

ExpertsLora expertsLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    ExpertsLora e;
    if (!m.isMoe() || !familyTraitsOrLlama(m.modelType).expertsWrappedByPeft)
        return e;
    auto named = [&](const char *n) { return std::find(targets.begin(), targets.end(), n) != targets.end(); };
    const bool gate = named("gate_proj"), up = named("up_proj");
    e.gateUp = gate && up;
    e.partial = gate != up;
    e.down = named("down_proj");
    return e;
}

std::vector<std::pair<int64_t, int64_t>> expertsLoraShapes(const ModelArch &m, const ExpertsLora &e, int64_t rank)
{
    const int64_t E = m.numExperts, Ie = m.expertIntermediateSize, h = m.hiddenSize;
    std::vector<std::pair<int64_t, int64_t>> out;
    if (e.gateUp) {
        const int64_t r2 = checkedMul(checkedMul(2, rank), E);
        out.push_back({r2, h});
        out.push_back({checkedMul(2, Ie), r2});
    }
    if (e.down) {
        const int64_t r1 = checkedMul(rank, E);
        out.push_back({r1, Ie});
        out.push_back({h, r1});
    }
    return out;
}

int64_t seqLenFor(const ModelArch &m, int64_t seqLen)
{
    return m.learnedPositions && m.maxPositions > 0 ? std::min(seqLen, m.maxPositions) : seqLen;
}

Attention attentionFor(const ModelArch &m, Attention attention)
{
    return familyTraitsOrLlama(m.modelType).attentionSinks ? Attention::Eager : attention;
}

std::vector<std::string> defaultLoraTargets(const ModelArch &m)
{
    if (!m.estimable) // no row to name its Linears: PEFT's own "all-linear" finds them when traced
        return {"all-linear"};
    std::vector<std::string> out;
    auto add = [&](const std::string &n) {
        if (!n.empty() && std::find(out.begin(), out.end(), n) == out.end())
            out.push_back(n);
    };
    for (const std::string &n : linearModuleNames(m))
        add(n);
    if (m.isMoe() && familyTraitsOrLlama(m.modelType).expertsWrappedByPeft)
        for (const char *n : {"gate_proj", "up_proj", "down_proj"}) // the experts' ParamWrappers
            add(n);
    return out.empty() ? std::vector<std::string>{"all-linear"} : out;
}

std::vector<std::string> loraTargetsFor(const ModelArch &m, const std::vector<std::string> &targets)
{
    if (!m.estimable) // no row to check the names against: PEFT checks them when it is traced
        return targets.empty() ? defaultLoraTargets(m) : targets;
    try {
        const auto on = loraAdaptedModules(m, targets);
        if (std::any_of(on.begin(), on.end(), [](bool b) { return b; }) || expertsLora(m, targets).any())
            return targets;
    } catch (const InputError &) {
        return targets; // a name Headroom does not know: the estimate names it
    }
    return defaultLoraTargets(m);
}

std::vector<std::string> loraTargetsOnSwitch(const ModelArch &from, const ModelArch &to,
                                             const std::vector<std::string> &targets)
{
    return targets == defaultLoraTargets(from) ? defaultLoraTargets(to) : loraTargetsFor(to, targets);
}

std::array<std::string, kLinearAttentionLinears> linearAttentionLinearNames()
{
    return {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
}

std::array<std::pair<int64_t, int64_t>, kLinearAttentionLinears> linearAttentionLinearShapes(const ModelArch &m)
{
    const ModelArch::LinearAttention &la = m.linearAttn;
    const int64_t h = m.hiddenSize;
    return {{{h, la.convWidth()}, {h, la.valueWidth()}, {h, la.valueHeads}, {h, la.valueHeads}, {la.valueWidth(), h}}};
}

std::array<bool, kLinearAttentionLinears> linearAttentionLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    std::array<bool, kLinearAttentionLinears> on{};
    if (!m.hasLinearAttention())
        return on;
    const auto names = linearAttentionLinearNames();
    for (size_t i = 0; i < names.size(); ++i)
        for (const auto &t : targets)
            if (t == names[i] || t == "all-linear")
                on[i] = true;
    return on;
}

bool sharedExpertGateLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    return m.isMoe() && m.sharedExpertGate && std::find(targets.begin(), targets.end(), "all-linear") != targets.end();
}

int64_t linearModuleLayerCount(const ModelArch &m, LinearModule mod)
{
    const bool attention = mod == LinearModule::Q || mod == LinearModule::K || mod == LinearModule::V || mod == LinearModule::O;
    return attention ? m.numLayers - m.linearAttentionLayerCount() : m.numLayers;
}

int64_t linearInFeatures(const ModelArch &m, LinearModule mod)
{
    if (linearModuleNames(m)[static_cast<size_t>(mod)].empty())
        return 0;
    const int64_t width = m.isMoe() ? m.sharedExpertIntermediateSize : m.intermediateSize;
    switch (mod) {
    case LinearModule::O: return m.numHeads * (m.isMla() ? m.vHeadDim : m.headDim);
    case LinearModule::Down: return width;
    default: return m.hiddenSize;
    }
}

int64_t linearOutFeatures(const ModelArch &m, LinearModule mod)
{
    if (linearModuleNames(m)[static_cast<size_t>(mod)].empty())
        return 0;
    const int64_t qOut = m.numHeads * m.headDim, kvOut = m.numKvHeads * m.headDim;
    const int64_t width = m.isMoe() ? m.sharedExpertIntermediateSize : m.intermediateSize;
    switch (mod) {
    case LinearModule::Q:
        if (m.isMla())
            return m.numHeads * (m.qkNopeDim + m.qkRopeDim);
        if (familyTraitsOrLlama(m.modelType).attentionOutputGate)
            return 2 * qOut; // the queries and their gates side by side
        return m.fusedQkv ? qOut + 2 * kvOut : qOut;
    case LinearModule::K:
    case LinearModule::V: return kvOut;
    case LinearModule::O:
    case LinearModule::Down: return m.hiddenSize;
    case LinearModule::Gate: return m.fusedGateUp ? 2 * width : width;
    case LinearModule::Up: return width;
    }
    return 0;
}

int64_t parameterCount(const ModelArch &m)
{
    int64_t n = 0;
    for (const auto &t : parameterInventory(m))
        n = checkedAdd(n, checkedMul(t.numel(), t.count));
    return n;
}

json toJson(const ModelArch &m)
{
    json j = {{"id", m.id},
              {"name", m.name},
              {"model_type", m.modelType},
              {"hidden_size", m.hiddenSize},
              {"num_hidden_layers", m.numLayers},
              {"num_attention_heads", m.numHeads},
              {"num_key_value_heads", m.numKvHeads},
              {"head_dim", m.headDim},
              {"intermediate_size", m.intermediateSize},
              {"vocab_size", m.vocabSize},
              {"max_position_embeddings", m.maxPositions},
              {"tie_word_embeddings", m.tiedEmbeddings},
              {"learned_positions", m.learnedPositions},
              {"mlp", m.mlp == MlpKind::Gated ? "gated" : "plain"},
              {"norm", m.norm == NormKind::RMSNorm ? "rmsnorm" : "layernorm"},
              {"qkv_bias", m.qkvBias},
              {"o_bias", m.oBias},
              {"mlp_bias", m.mlpBias},
              {"qk_norm", m.qkNorm},
              {"norms_per_layer", m.normsPerLayer},
              {"activation", m.activation},
              {"final_logit_softcapping", m.finalLogitSoftcap},
              {"fused_qkv", m.fusedQkv},
              {"fused_gate_up", m.fusedGateUp},
              {"parallel_residual", m.parallelResidual},
              {"rotary_fraction", m.rotaryFraction},
              {"embd_dropout", m.embdDropout},
              {"attn_dropout", m.attnDropout},
              {"resid_dropout", m.residDropout},
              {"num_experts", m.numExperts},
              {"num_experts_per_tok", m.expertsPerToken},
              {"expert_intermediate_size", m.expertIntermediateSize},
              {"shared_expert_intermediate_size", m.sharedExpertIntermediateSize},
              {"shared_expert_gate", m.sharedExpertGate},
              {"first_dense_layers", m.firstDenseLayers},
              {"q_lora_rank", m.qLoraRank},
              {"kv_lora_rank", m.kvLoraRank},
              {"qk_nope_head_dim", m.qkNopeDim},
              {"qk_rope_head_dim", m.qkRopeDim},
              {"v_head_dim", m.vHeadDim},
              {"parameters", m.estimable ? parameterCount(m) : 0}};
    if (m.lmHeadBias) // only where it is true: every other model's form stays as it was
        j["lm_head_bias"] = true;
    if (!m.source.empty())
        j["source"] = m.source;
    if (!m.hfConfig.is_null())
        j["hf_config"] = m.hfConfig;
    if (!m.estimable)
        j["estimable"] = false;
    return j;
}

ModelArch modelArchFromJson(const json &j)
{
    // A preset file {"headroom": {...}, "config": {...HF...}} or Headroom's own flat form.
    if (j.is_object() && j.contains("config") && j.contains("headroom")) {
        const json &meta = j.at("headroom");
        if (!meta.is_object())
            throw InputError("model.headroom", show(meta).substr(0, 40), "must be a JSON object");
        ModelArch m = modelFromHfConfig(j.at("config"), optionalString(meta, "id", "", "model.headroom"));
        m.name = optionalString(meta, "name", m.id, "model.headroom");
        m.source = optionalString(meta, "source", "", "model.headroom");
        // 0: not published (a config.json without a model card).
        if (meta.contains("published_params") && !(meta.at("published_params").is_number_integer() &&
                                                   meta.at("published_params").get<int64_t>() == 0))
            m.publishedParams = requireInt(meta, "published_params", "model.headroom");
        return m;
    }
    const std::string ctx = "model";
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    ModelArch m;
    m.id = optionalString(j, "id", "", ctx);
    m.name = optionalString(j, "name", m.id, ctx);
    m.source = optionalString(j, "source", "", ctx);
    m.modelType = optionalString(j, "model_type", "llama", ctx);
    m.hiddenSize = requireInt(j, "hidden_size", ctx);
    m.numLayers = requireInt(j, "num_hidden_layers", ctx);
    m.numHeads = requireInt(j, "num_attention_heads", ctx);
    m.numKvHeads = optionalInt(j, "num_key_value_heads", m.numHeads, ctx);
    m.headDim = optionalInt(j, "head_dim", m.hiddenSize / m.numHeads, ctx);
    m.intermediateSize = requireInt(j, "intermediate_size", ctx);
    m.vocabSize = requireInt(j, "vocab_size", ctx);
    m.maxPositions = optionalInt(j, "max_position_embeddings", 2048, ctx);
    m.tiedEmbeddings = optionalBool(j, "tie_word_embeddings", false, ctx);
    m.learnedPositions = optionalBool(j, "learned_positions", false, ctx);
    const std::string mlp = optionalString(j, "mlp", "gated", ctx);
    if (mlp != "gated" && mlp != "plain")
        throw InputError("model.mlp", mlp, "must be gated or plain");
    m.mlp = mlp == "gated" ? MlpKind::Gated : MlpKind::Plain;
    const std::string norm = optionalString(j, "norm", "rmsnorm", ctx);
    if (norm != "rmsnorm" && norm != "layernorm")
        throw InputError("model.norm", norm, "must be rmsnorm or layernorm");
    m.norm = norm == "rmsnorm" ? NormKind::RMSNorm : NormKind::LayerNorm;
    m.qkvBias = optionalBool(j, "qkv_bias", false, ctx);
    m.oBias = optionalBool(j, "o_bias", false, ctx);
    m.mlpBias = optionalBool(j, "mlp_bias", false, ctx);
    m.qkNorm = optionalBool(j, "qk_norm", false, ctx);
    // Range-checked before it narrows to int (issue 32, row 4: 2^31 became a negative count).
    const int64_t norms = optionalInt(j, "norms_per_layer", 2, ctx);
    if (norms < 0 || norms > 16)
        throw InputError("model.norms_per_layer", std::to_string(norms), "must be between 0 and 16 (norms per decoder layer)");
    m.normsPerLayer = static_cast<int>(norms);
    m.activation = optionalString(j, "activation", "silu", ctx);
    m.activationSavedTensors = activationSaved(m.activation);
    if (j.contains("final_logit_softcapping") && j.at("final_logit_softcapping").is_number())
        m.finalLogitSoftcap = j.at("final_logit_softcapping").get<double>();
    m.fusedQkv = optionalBool(j, "fused_qkv", false, ctx);
    m.fusedGateUp = optionalBool(j, "fused_gate_up", false, ctx);
    m.parallelResidual = optionalBool(j, "parallel_residual", false, ctx);
    m.lmHeadBias = optionalBool(j, "lm_head_bias", false, ctx);
    m.rotaryFraction = optionalDouble(j, "rotary_fraction", 1.0, ctx);
    m.embdDropout = optionalDouble(j, "embd_dropout", 0.0, ctx);
    m.attnDropout = optionalDouble(j, "attn_dropout", 0.0, ctx);
    m.residDropout = optionalDouble(j, "resid_dropout", 0.0, ctx);
    auto zeroOk = [&](const char *k) {
        return j.contains(k) && j.at(k).is_number_integer() ? j.at(k).get<int64_t>() : int64_t{0};
    };
    m.numExperts = zeroOk("num_experts");
    m.expertsPerToken = zeroOk("num_experts_per_tok");
    m.expertIntermediateSize = zeroOk("expert_intermediate_size");
    m.sharedExpertIntermediateSize = zeroOk("shared_expert_intermediate_size");
    m.sharedExpertGate = optionalBool(j, "shared_expert_gate", false, ctx);
    m.firstDenseLayers = zeroOk("first_dense_layers");
    m.qLoraRank = zeroOk("q_lora_rank");
    m.kvLoraRank = zeroOk("kv_lora_rank");
    m.qkNopeDim = zeroOk("qk_nope_head_dim");
    m.qkRopeDim = zeroOk("qk_rope_head_dim");
    m.vHeadDim = zeroOk("v_head_dim");
    if (j.contains("hf_config") && j.at("hf_config").is_object())
        m.hfConfig = j.at("hf_config");
    m.validate();
    return m;
}

ModelArch modelArchFromJsonLenient(const json &j)
{
    // Only a model_type with no row is tolerated, with its config.json kept (under "config" or
    // "hf_config"); any other problem is still the file's.
    const json *hf = nullptr;
    if (j.is_object() && j.contains("config") && j.at("config").is_object())
        hf = &j.at("config");
    else if (j.is_object() && j.contains("hf_config") && j.at("hf_config").is_object())
        hf = &j.at("hf_config");
    const auto types = supportedModelTypes();
    if (!hf || !hf->contains("model_type") || !hf->at("model_type").is_string() ||
        std::find(types.begin(), types.end(), hf->at("model_type").get<std::string>()) != types.end())
        return modelArchFromJson(j);
    ModelArch m;
    m.estimable = false;
    m.modelType = hf->at("model_type").get<std::string>().substr(0, 100);
    const json meta = j.contains("headroom") && j.at("headroom").is_object() ? j.at("headroom") : j;
    m.id = meta.contains("id") && meta.at("id").is_string() ? meta.at("id").get<std::string>().substr(0, 200)
                                                             : m.modelType;
    m.name = meta.contains("name") && meta.at("name").is_string() ? meta.at("name").get<std::string>().substr(0, 200)
                                                                 : m.id;
    m.hfConfig = *hf;
    return m;
}

ModelArch modelFromHfConfigLenient(const json &config, const std::string &id)
{
    try {
        return modelFromHfConfig(config, id);
    } catch (const InputError &e) {
        if (e.field() != "config.model_type" || !config.is_object() || !config.contains("model_type") ||
            !config.at("model_type").is_string())
            throw;
    }
    ModelArch m;
    m.estimable = false;
    m.modelType = config.at("model_type").get<std::string>().substr(0, 100);
    m.id = id.empty() ? m.modelType : id.substr(0, 4096);
    m.name = config.contains("_name_or_path") && config.at("_name_or_path").is_string() &&
                     !config.at("_name_or_path").get<std::string>().empty()
                 ? config.at("_name_or_path").get<std::string>().substr(0, 200)
                 : m.modelType;
    m.hfConfig = config;
    return m;
}

ModelArch modelFromFileJsonLenient(const json &j, const std::string &id)
{
    return j.is_object() && j.contains("headroom") ? modelArchFromJsonLenient(j) : modelFromHfConfigLenient(j, id);
}

} // namespace headroom
