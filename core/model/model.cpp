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
    // A legacy vision-language config.json (Qwen2.5-VL's on the Hub) states its language model at
    // the top level, as Transformers still reads it.
    const bool nested = traits.textConfigNested && !(traits.visionLanguage && !c.contains("text_config"));
    if (nested && (!c.contains("text_config") || !c.at("text_config").is_object()))
        throw InputError("config.text_config", c.contains("text_config") ? show(c.at("text_config")).substr(0, 40) : "(missing)",
                         "a " + m.modelType + " config.json holds its language model's sizes in a text_config object");
    const Family &family = *findFamily(m.modelType); // familyTraits() above refused a type with none
    // The text configuration class's defaults under what the file states (Family::textDefaults).
    json merged;
    if (nested && family.textDefaults) {
        merged = family.textDefaults();
        merged.update(c.at("text_config"));
    }
    const json &tc = !nested ? c : family.textDefaults ? merged : c.at("text_config");
    const std::string tctx = nested ? "config.text_config" : ctx;
    family.readConfig(ConfigFields(tc, tctx), m);
    if (family.outer)
        family.outer(ConfigFields(c, ctx), m); // a composite's own fields (Family::outer)
    m.qkNorm = traits.qkNorm != QkNorm::None;
    if (traits.norms == NormPlacement::Sandwich)
        m.normsPerLayer = m.hasPerLayerInputs() ? 5 : 4; // Gemma 4: post_per_layer_input_norm
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

int64_t seqLenFor(const ModelArch &m, int64_t seqLen)
{
    return m.learnedPositions && m.maxPositions > 0 ? std::min(seqLen, m.maxPositions) : seqLen;
}

Attention attentionFor(const ModelArch &m, Attention attention)
{
    return familyTraitsOrLlama(m.modelType).attentionSinks && attention == Attention::SDPA ? Attention::Eager : attention;
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
        if (meta.contains("also")) {
            const json &also = meta.at("also");
            if (!also.is_array() || also.size() > 64)
                throw InputError("model.headroom.also", show(also).substr(0, 40), "must be a list of at most 64 Hub ids");
            for (const json &a : also) {
                if (!a.is_string() || a.get<std::string>().empty() || a.get<std::string>().size() > 200)
                    throw InputError("model.headroom.also", show(a).substr(0, 40), "each entry must be a Hub id");
                m.alsoSources.push_back(a.get<std::string>());
            }
        }
        m.visionBuild = optionalString(meta, "vision_build", "", "model.headroom");
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
