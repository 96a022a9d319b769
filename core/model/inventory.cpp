// A model's parameters and Linear modules, as its family builds them: the inventory of
// parameter tensors (per shape: Gemma 4's global layers have their own), the decoder's Linears
// by their Hugging Face names, and what PEFT's LoRA wraps of them.
#include "headroom/model.h"

#include "headroom/error.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

namespace headroom {

namespace {
// The MLP's tensors, or the MoE block's: the router, the stacked experts, the shared expert,
// DeepSeek's first dense layers.
void mlpInventory(const ModelArch &m, std::vector<ParamTensor> &p)
{
    const int64_t h = m.hiddenSize, L = m.numLayers;
    const FamilyTraits &ft = familyTraitsOrLlama(m.modelType);
    auto add = [&](std::string module, int64_t rows, int64_t cols, int64_t count, bool linear = false) {
        p.push_back({std::move(module), rows, cols, count, linear});
    };
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
        // Gemma 4's key/value-sharing layers may have an MLP twice as wide (use_double_wide_mlp).
        int64_t wide = 0;
        for (int64_t l = 0; l < L; ++l)
            wide += m.mlpWidth(l) != m.intermediateSize ? 1 : 0;
        for (auto [I, n] : {std::pair{m.intermediateSize, L - wide}, {2 * m.intermediateSize, wide}}) {
            if (n == 0)
                continue;
            if (m.fusedGateUp)
                add("gate_up_proj", 2 * I, h, n, true);
            else if (m.mlp == MlpKind::Gated)
                add("gate_proj", I, h, n, true);
            if (!m.fusedGateUp)
                add("up_proj", I, h, n, true);
            add("down_proj", h, I, n, true);
            if (m.mlpBias) {
                if (m.mlp == MlpKind::Gated)
                    add("gate_proj.bias", I, 1, n);
                add("up_proj.bias", I, 1, n);
                add("down_proj.bias", h, 1, n);
            }
        }
    }
}
} // namespace

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
        // Per shape: Gemma 4's global layers have their own (Note [Gemma 4]).
        using M = LinearModule;
        for (auto [mod, name] : {std::pair{M::Q, "q_proj"}, {M::K, "k_proj"}, {M::V, "v_proj"}})
            for (const LinearGroup &g : linearModuleGroups(m, mod)) {
                add(name, g.out, g.in, g.layers, true);
                if (m.qkvBias)
                    add(std::string(name) + ".bias", g.out, 1, g.layers);
            }
    }
    if (!m.isMla())
        for (const LinearGroup &g : linearModuleGroups(m, LinearModule::O)) {
            add("o_proj", g.out, g.in, g.layers, true);
            if (m.oBias)
                add("o_proj.bias", h, 1, g.layers);
        }
    if (ft.attentionSinks)
        add("self_attn.sinks", m.numHeads, 1, La);
    if (m.qkNorm) {
        const bool projection = ft.qkNorm == QkNorm::Projection;
        if (projection) {
            add("q_norm", qOut, 1, La);
            add("k_norm", kvOut, 1, La);
        } else {
            // Per layer: Gemma 4's global layers have their own head size, and its key/value-sharing
            // layers no k_norm.
            std::vector<std::pair<int64_t, int64_t>> q, k; // (width, layers)
            auto count = [](std::vector<std::pair<int64_t, int64_t>> &v, int64_t w) {
                auto it = std::find_if(v.begin(), v.end(), [&](const auto &x) { return x.first == w; });
                if (it == v.end())
                    v.push_back({w, 1});
                else
                    ++it->second;
            };
            for (int64_t l = 0; l < L; ++l) {
                if (m.isLinearAttentionLayer(l))
                    continue;
                const ModelArch::AttentionGeometry g = m.attentionAt(l);
                count(q, g.headDim);
                if (g.keyProjection)
                    count(k, g.headDim);
            }
            for (auto [w, n] : q)
                add("q_norm", w, 1, n);
            for (auto [w, n] : k)
                add("k_norm", w, 1, n);
        }
    }
    if (m.hasPerLayerInputs()) { // Gemma 4: each layer's gate and projection of its per-layer input
        const int64_t P = m.perLayerInputSize;
        add("per_layer_input_gate", P, h, L, true);
        add("per_layer_projection", h, P, L, true);
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
    mlpInventory(m, p);
    add("layer_norms", h, 1, L * m.normsPerLayer * normTensors);
    add("final_norm", h, 1, normTensors);
    if (m.hasPerLayerInputs()) { // Gemma 4's per-layer inputs, the model's
        const int64_t P = m.perLayerInputSize, LP = checkedMul(L, P);
        add("embed_tokens_per_layer", m.perLayerVocab, LP, 1);
        add("per_layer_model_projection", LP, h, 1, true);
        add("per_layer_projection_norm", P, 1, 1);
    }
    if (m.scoreLabels > 0)
        add("score", m.scoreLabels, h, 1);
    else if (!m.tiedEmbeddings)
        add("lm_head", m.vocabSize, h, 1);
    if (m.lmHeadBias)
        add("lm_head.bias", m.vocabSize, 1, 1);
    return p;
}

ModelArch asSequenceClassifier(ModelArch m, int64_t labels)
{
    m.scoreLabels = labels;
    m.tiedEmbeddings = false; // no lm_head to tie
    m.lmHeadBias = false;
    return m;
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

bool loraWraps(const std::string &name, const std::vector<std::string> &targets)
{
    return std::any_of(targets.begin(), targets.end(), [&](const std::string &t) { return t == name || t == "all-linear"; });
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
        on[i] = !names[i].empty() && loraWraps(names[i], targets);
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

namespace {
// Which of a family's own Linears LoRA wraps: those named, every one for all-linear.
template<size_t N>
std::array<bool, N> namedLora(bool present, const std::array<std::string, N> &names, const std::vector<std::string> &targets)
{
    std::array<bool, N> on{};
    for (size_t i = 0; present && i < N; ++i)
        on[i] = loraWraps(names[i], targets);
    return on;
}
} // namespace

std::array<bool, kLinearAttentionLinears> linearAttentionLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    return namedLora(m.hasLinearAttention(), linearAttentionLinearNames(), targets);
}

std::array<std::string, kMlaLinears> mlaLinearNames()
{
    return {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};
}

std::array<std::pair<int64_t, int64_t>, kMlaLinears> mlaLinearShapes(const ModelArch &m)
{
    const int64_t h = m.hiddenSize, H = m.numHeads, qk = m.qkNopeDim + m.qkRopeDim;
    return {{{h, m.qLoraRank}, {m.qLoraRank, checkedMul(H, qk)}, {h, m.kvLoraRank + m.qkRopeDim},
             {m.kvLoraRank, checkedMul(H, m.qkNopeDim + m.vHeadDim)}}};
}

std::array<bool, kMlaLinears> mlaLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    std::array<bool, kMlaLinears> on = namedLora(m.isMla(), mlaLinearNames(), targets);
    if (m.qLoraRank <= 0) // q_proj instead of q_a_proj and q_b_proj
        on[0] = on[1] = false;
    return on;
}

std::array<std::string, kPerLayerInputLinears> perLayerInputLinearNames()
{
    return {"per_layer_input_gate", "per_layer_projection", "per_layer_model_projection"};
}

std::array<std::pair<int64_t, int64_t>, kPerLayerInputLinears> perLayerInputLinearShapes(const ModelArch &m)
{
    const int64_t h = m.hiddenSize, p = m.perLayerInputSize;
    return {{{h, p}, {p, h}, {h, checkedMul(m.numLayers, p)}}};
}

std::array<bool, kPerLayerInputLinears> perLayerInputLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    return namedLora(m.hasPerLayerInputs(), perLayerInputLinearNames(), targets);
}

bool sharedExpertGateLora(const ModelArch &m, const std::vector<std::string> &targets)
{
    return m.isMoe() && m.sharedExpertGate && std::find(targets.begin(), targets.end(), "all-linear") != targets.end();
}

int64_t linearModuleLayerCount(const ModelArch &m, LinearModule mod)
{
    int64_t n = 0;
    for (const LinearGroup &g : linearModuleGroups(m, mod))
        n += g.layers;
    return n;
}

std::vector<LinearGroup> linearModuleGroups(const ModelArch &m, LinearModule mod)
{
    std::vector<LinearGroup> out;
    if (linearModuleNames(m)[static_cast<size_t>(mod)].empty())
        return out;
    const bool attention = mod == LinearModule::Q || mod == LinearModule::K || mod == LinearModule::V || mod == LinearModule::O;
    for (int64_t l = 0; l < m.numLayers; ++l) {
        if (attention && m.isLinearAttentionLayer(l))
            continue;
        if (mod == LinearModule::V && !m.attentionAt(l).valueProjection)
            continue;
        if (mod == LinearModule::K && !m.attentionAt(l).keyProjection)
            continue;
        const int64_t in = linearInFeatures(m, mod, l), o = linearOutFeatures(m, mod, l);
        auto it = std::find_if(out.begin(), out.end(), [&](const LinearGroup &g) { return g.in == in && g.out == o; });
        if (it == out.end())
            out.push_back({in, o, 1});
        else
            ++it->layers;
    }
    return out;
}

int64_t linearInFeatures(const ModelArch &m, LinearModule mod, int64_t layer)
{
    if (linearModuleNames(m)[static_cast<size_t>(mod)].empty())
        return 0;
    const int64_t width = m.isMoe() ? m.sharedExpertIntermediateSize : m.mlpWidth(layer);
    switch (mod) {
    case LinearModule::O: return m.numHeads * (m.isMla() ? m.vHeadDim : m.attentionAt(layer).headDim);
    case LinearModule::Down: return width;
    default: return m.hiddenSize;
    }
}

int64_t linearOutFeatures(const ModelArch &m, LinearModule mod, int64_t layer)
{
    if (linearModuleNames(m)[static_cast<size_t>(mod)].empty())
        return 0;
    const ModelArch::AttentionGeometry g = m.attentionAt(layer);
    const int64_t qOut = m.numHeads * g.headDim, kvOut = g.kvHeads * g.headDim;
    const int64_t width = m.isMoe() ? m.sharedExpertIntermediateSize : m.mlpWidth(layer);
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

int64_t visionParameterCount(const ModelArch &m)
{
    return familyTraitsOrLlama(m.modelType).visionLanguage && m.vision.present()
               ? checkedAdd(m.vision.towerParams, m.vision.projectorParams)
               : 0;
}

int64_t checkpointParameterCount(const ModelArch &m)
{
    return checkedAdd(parameterCount(m), visionParameterCount(m));
}

} // namespace headroom
