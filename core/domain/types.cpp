#include "headroom/types.h"

#include <tuple>

#include <cctype>
#include <algorithm>
#include <cstdio>

#include "headroom/error.h"
#include "headroom/refusal.h"

#include <map>
#include <utility>

namespace headroom {

namespace {

template<typename E, size_t N>
E parseEnum(std::string_view s, const std::pair<E, std::string_view> (&table)[N], const std::string &field)
{
    for (const auto &[e, name] : table)
        if (name == s)
            return e;
    std::string accepted;
    for (const auto &[e, name] : table)
        accepted += (accepted.empty() ? "" : ", ") + std::string(name);
    throw InputError(field, std::string(s), "unknown value (accepted: " + accepted + ")");
}

template<typename E, size_t N>
std::string_view nameOf(E e, const std::pair<E, std::string_view> (&table)[N])
{
    for (const auto &[v, name] : table)
        if (v == e)
            return name;
    return "?";
}

template<typename Row>
auto parseRow(std::string_view s, const std::vector<Row> &table, const std::string &field)
{
    std::string accepted;
    for (const auto &r : table) {
        if (r.name == s)
            return r.id;
        accepted += (accepted.empty() ? "" : ", ") + std::string(r.name);
    }
    throw InputError(field, std::string(s), "unknown value (accepted: " + accepted + ")");
}

template<typename E>
std::string_view rowName(E e, const std::vector<EnumRow<E>> &table)
{
    for (const auto &r : table)
        if (r.id == e)
            return r.name;
    return "?";
}

const std::vector<EnumRow<Precision>> kPrecisionTable = {{Precision::BF16, "bf16", "bf16"},
                                                          {Precision::AmpBF16, "amp-bf16", "amp-bf16 (autocast)"},
                                                          {Precision::FP16, "fp16", "fp16"},
                                                          {Precision::AmpFP16, "amp-fp16", "amp-fp16 (autocast)"},
                                                          {Precision::FP32, "fp32", "fp32"}};
const std::vector<EnumRow<OptimizerImpl>> kImplTable = {{OptimizerImpl::Foreach, "foreach", "foreach (PyTorch default)"},
                                                         {OptimizerImpl::Fused, "fused", "fused"},
                                                         {OptimizerImpl::ForLoop, "for-loop", "for-loop"}};
const std::vector<EnumRow<FineTune>> kFineTuneTable = {
    {FineTune::Full, "full", "Full fine-tuning"}, {FineTune::LoRA, "lora", "LoRA"}, {FineTune::QLoRA, "qlora", "QLoRA (NF4)"}};
const std::vector<EnumRow<Attention>> kAttentionTable = {{Attention::SDPA, "sdpa", "SDPA (flash / mem-efficient)"},
                                                          {Attention::Eager, "eager", "eager"},
                                                          {Attention::Flash, "flash", "flash kernel (flash-attn 2/3)"}};
// Adding an optimizer: a row here, its state and step temporaries in the simulator
// (program.cpp optimizerStep), and its step in the LibTorch probe and the transformers engine.
const std::vector<OptimizerTraits> kOptimizerTable = {
    {Optimizer::AdamW, "adamw", "AdamW", "torch.optim.AdamW: two moments per parameter (exp_avg, exp_avg_sq)",
     "adamw_torch", "adamw_torch adamw_torch_fused adamw_hf adamw adam paged_adamw_32bit paged_adamw"},
    {Optimizer::AdamW8bit, "adamw-8bit", "AdamW 8-bit",
     "bitsandbytes AdamW8bit: two uint8 moments with an fp32 scale per 256 values (32-bit below 4,096 values)",
     "adamw_bnb_8bit", "adamw_bnb_8bit adamw_8bit bnb_8bit adamw_torch_8bit"},
    {Optimizer::PagedAdamW8bit, "paged-adamw-8bit", "Paged AdamW 8-bit",
     "bitsandbytes PagedAdamW8bit: AdamW 8-bit whose moments of tensors of 100k values or more live in CUDA managed "
     "memory, which the driver pages out to host RAM under memory pressure instead of failing",
     "paged_adamw_8bit", "paged_adamw_8bit"},
    {Optimizer::SGD, "sgd", "SGD", "torch.optim.SGD without momentum: no state", "sgd", "sgd"},
    {Optimizer::SGDMomentum, "sgd-momentum", "SGD + momentum", "torch.optim.SGD with momentum: one buffer per parameter",
     "sgd", ""},
    {Optimizer::Adafactor, "adafactor", "Adafactor",
     "transformers' Adafactor: factored second moments (a row and a column vector per matrix), no first moment",
     "adafactor", "adafactor"},
    {Optimizer::Lion, "lion", "Lion", "bitsandbytes Lion (32-bit): one fp32 momentum per parameter", "lion_32bit",
     "lion_32bit paged_lion_32bit lion lion_8bit paged_lion_8bit"},
};
const std::pair<Loss, std::string_view> kLosses[] = {{Loss::Standard, "standard"}, {Loss::Fused, "fused"}};
const std::pair<TrainingMode, std::string_view> kModes[] = {
    {TrainingMode::SFT, "sft"}, {TrainingMode::DPO, "dpo"}, {TrainingMode::KTO, "kto"}, {TrainingMode::ORPO, "orpo"}, {TrainingMode::Reward, "reward"},
    {TrainingMode::GRPO, "grpo"}};
const std::pair<Reference, std::string_view> kReferences[] = {
    {Reference::Adapter, "adapter"}, {Reference::Copy, "copy"}, {Reference::None, "none"}};
const std::pair<Category, std::string_view> kCategories[] = {{Category::Weights, "weights"},
                                                              {Category::Gradients, "gradients"},
                                                              {Category::OptimizerState, "optimizer_state"},
                                                              {Category::Activations, "activations"},
                                                              {Category::Logits, "logits"},
                                                              {Category::Temporaries, "temporaries"},
                                                              {Category::Communication, "communication"},
                                                              {Category::AllocatorSlack, "allocator_slack"},
                                                              {Category::CudaContext, "cuda_context"},
                                                              {Category::ReferenceModel, "reference_model"}};
const std::pair<Phase, std::string_view> kPhases[] = {{Phase::AfterLoad, "after_load"},
                                                       {Phase::Forward, "forward"},
                                                       {Phase::Backward, "backward"},
                                                       {Phase::Optimizer, "optimizer"},
                                                       {Phase::Generation, "generation"},
                                                       {Phase::Reference, "reference"}};

} // namespace

const std::vector<EnumRow<Precision>> &precisionTable() { return kPrecisionTable; }
const std::vector<EnumRow<OptimizerImpl>> &optimizerImplTable() { return kImplTable; }
const std::vector<EnumRow<FineTune>> &fineTuneTable() { return kFineTuneTable; }
const std::vector<EnumRow<Attention>> &attentionTable() { return kAttentionTable; }

const std::vector<OptimizerTraits> &optimizerTable()
{
    return kOptimizerTable;
}

const OptimizerTraits &traits(Optimizer o)
{
    for (const auto &t : kOptimizerTable)
        if (t.id == o)
            return t;
    return kOptimizerTable.front(); // every enumerator has a row (tst_serialize checks)
}

namespace {
template<typename E>
std::vector<std::string_view> namesInOrder(size_t count)
{
    std::vector<std::string_view> v;
    for (size_t i = 0; i < count; ++i)
        v.push_back(toString(static_cast<E>(i)));
    return v;
}
} // namespace

std::vector<std::pair<std::string_view, std::vector<std::string_view>>> sharedVocabulary()
{
    return {{"PHASES", namesInOrder<Phase>(kPhaseCount)},
            {"CATEGORIES", namesInOrder<Category>(kCategoryCount)},
            {"PRECISIONS", namesInOrder<Precision>(kPrecisionTable.size())},
            {"OPTIMIZERS", namesInOrder<Optimizer>(kOptimizerTable.size())},
            {"IMPLS", namesInOrder<OptimizerImpl>(kImplTable.size())},
            {"FINETUNES", namesInOrder<FineTune>(kFineTuneTable.size())},
            {"ATTENTIONS", namesInOrder<Attention>(kAttentionTable.size())},
            {"LOSSES", namesInOrder<Loss>(std::size(kLosses))},
            {"MODES", namesInOrder<TrainingMode>(std::size(kModes))},
            {"REFERENCES", namesInOrder<Reference>(std::size(kReferences))}};
}

std::string_view toString(Precision e) { return rowName(e, kPrecisionTable); }
std::string_view toString(Optimizer e) { return traits(e).name; }
std::string_view toString(OptimizerImpl e) { return rowName(e, kImplTable); }
std::string_view toString(FineTune e) { return rowName(e, kFineTuneTable); }
std::string_view toString(Attention e) { return rowName(e, kAttentionTable); }
std::string_view toString(Loss e) { return nameOf(e, kLosses); }
std::string_view toString(TrainingMode e) { return nameOf(e, kModes); }
std::string modeTitle(TrainingMode e)
{
    switch (e) {
    case TrainingMode::SFT: return "supervised";
    case TrainingMode::Reward: return "reward-model";
    default: {
        std::string s(toString(e));
        for (char &ch : s)
            ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        return s;
    }
    }
}
std::string_view toString(Reference e) { return nameOf(e, kReferences); }
std::string_view toString(Category e) { return nameOf(e, kCategories); }
std::string_view toString(Phase e) { return nameOf(e, kPhases); }

Precision parsePrecision(std::string_view s, const std::string &f) { return parseRow(s, kPrecisionTable, f); }
Optimizer parseOptimizer(std::string_view s, const std::string &f) { return parseRow(s, kOptimizerTable, f); }
OptimizerImpl parseOptimizerImpl(std::string_view s, const std::string &f) { return parseRow(s, kImplTable, f); }
FineTune parseFineTune(std::string_view s, const std::string &f) { return parseRow(s, kFineTuneTable, f); }
Attention parseAttention(std::string_view s, const std::string &f) { return parseRow(s, kAttentionTable, f); }
Loss parseLoss(std::string_view s, const std::string &f) { return parseEnum(s, kLosses, f); }
TrainingMode parseTrainingMode(std::string_view s, const std::string &f) { return parseEnum(s, kModes, f); }
Reference parseReference(std::string_view s, const std::string &f) { return parseEnum(s, kReferences, f); }
Category parseCategory(std::string_view s, const std::string &f) { return parseEnum(s, kCategories, f); }
Phase parsePhase(std::string_view s, const std::string &f) { return parseEnum(s, kPhases, f); }

std::string_view describe(Category c)
{
    switch (c) {
    case Category::Weights: return "The model's parameters as stored on the GPU (quantized for QLoRA).";
    case Category::Gradients: return "One gradient per trainable parameter, filled during backward.";
    case Category::OptimizerState: return "What the optimizer keeps between steps, e.g. AdamW's two moments.";
    case Category::Activations: return "Tensors the forward pass saves for backward, growing with batch x sequence.";
    case Category::Logits: return "The lm-head output and HF's fp32 loss buffers, batch x sequence x vocabulary.";
    case Category::Temporaries: return "Short-lived buffers: optimizer-step scratch, backward grads in flight, cuBLAS workspace.";
    case Category::Communication: return "Buffers for collectives between GPUs (DDP buckets, ZeRO gathers, NCCL).";
    case Category::AllocatorSlack: return "Memory PyTorch's caching allocator has reserved but not handed out.";
    case Category::CudaContext: return "The CUDA context, cuBLAS and kernels: memory used outside PyTorch's allocator.";
    case Category::ReferenceModel: return "A frozen copy of the model as the preference loss's reference (DPO, KTO): its weights and buffers.";
    }
    return "";
}

std::string_view label(Category c)
{
    switch (c) {
    case Category::Weights: return "Weights";
    case Category::Gradients: return "Gradients";
    case Category::OptimizerState: return "Optimizer state";
    case Category::Activations: return "Activations";
    case Category::Logits: return "Logits";
    case Category::Temporaries: return "Temporaries";
    case Category::Communication: return "Communication";
    case Category::AllocatorSlack: return "Allocator slack";
    case Category::CudaContext: return "CUDA context";
    case Category::ReferenceModel: return "Reference model";
    }
    return "";
}

std::string_view label(Phase p)
{
    switch (p) {
    case Phase::AfterLoad: return "After load";
    case Phase::Forward: return "Forward peak";
    case Phase::Backward: return "Backward peak";
    case Phase::Optimizer: return "Optimizer peak";
    case Phase::Generation: return "Generation peak";
    case Phase::Reference: return "Reference peak";
    }
    return "";
}

std::array<bool, kLinearModuleCount> loraTargetMask(const std::vector<std::string> &targets)
{
    using M = LinearModule;
    // Including the fused modules of some families (Phi-3, GPT-2, GPT-NeoX, Mixtral experts).
    static const std::map<std::string, std::vector<M>> aliases = {
        {"q_proj", {M::Q}},          {"k_proj", {M::K}},            {"v_proj", {M::V}},
        {"o_proj", {M::O}},          {"gate_proj", {M::Gate}},      {"up_proj", {M::Up}},
        {"down_proj", {M::Down}},    {"qkv_proj", {M::Q, M::K, M::V}}, {"query_key_value", {M::Q, M::K, M::V}},
        {"c_attn", {M::Q, M::K, M::V}}, {"dense", {M::O}},          {"gate_up_proj", {M::Gate, M::Up}},
        {"c_fc", {M::Up}},           {"c_proj", {M::O, M::Down}},   {"fc1", {M::Up}},              {"fc2", {M::Down}},
        {"dense_h_to_4h", {M::Up}},  {"dense_4h_to_h", {M::Down}},  {"w1", {M::Gate}},
        {"w3", {M::Up}},             {"w2", {M::Down}},
        // Qwen3.5's gated DeltaNet Linears (model.h linearAttentionLora): none of the seven
        {"in_proj_qkv", {}},         {"in_proj_z", {}},             {"in_proj_b", {}},
        {"in_proj_a", {}},           {"out_proj", {}},
        // Multi-head latent attention's (model.h mlaLora)
        {"q_a_proj", {}},            {"q_b_proj", {}},              {"kv_a_proj_with_mqa", {}},
        {"kv_b_proj", {}},
        // Gemma 4's per-layer-input Linears (model.h perLayerInputLora)
        {"per_layer_input_gate", {}}, {"per_layer_projection", {}}, {"per_layer_model_projection", {}},
        {"all-linear", {M::Q, M::K, M::V, M::O, M::Gate, M::Up, M::Down}},
    };
    std::array<bool, kLinearModuleCount> mask{};
    for (const auto &t : targets) {
        auto it = aliases.find(t);
        if (it == aliases.end()) {
            std::string list;
            for (const auto &[name, mods] : aliases)
                list += (list.empty() ? "" : ", ") + name;
            throw InputError("lora_targets", t, "unknown module (known: " + list + ")");
        }
        for (M m : it->second)
            mask[static_cast<size_t>(m)] = true;
    }
    return mask;
}

int parameterBytes(Precision p)
{
    return (p == Precision::BF16 || p == Precision::FP16) ? 2 : 4;
}

int computeBytes(Precision p)
{
    return p == Precision::FP32 ? 4 : 2;
}

bool isAmp(Precision p)
{
    return p == Precision::AmpBF16 || p == Precision::AmpFP16;
}

void TrainingConfig::validate() const
{
    auto range = [](const std::string &field, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi)
            throw InputError(field, std::to_string(v),
                             "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    };
    range("batch", microBatch, 1, 1 << 20);
    range("seq", seqLen, 1, 1 << 24);
    range("grad_accum", gradAccum, 1, kMaxGradAccum);
    range("gpus", worldSize, 1, 1 << 16);
    range("zero", zeroStage, 0, 3);
    range("checkpoint_layers", checkpointLayers, 0, 1 << 20);
    if (checkpointLayers > 0 && !gradCheckpointing)
        throw InputError("checkpoint_layers", std::to_string(checkpointLayers),
                         "checkpoints layers only with gradient checkpointing on");
    range("checkpoint_every", checkpointEvery, 0, 1 << 20);
    if (checkpointEvery > 1 && !gradCheckpointing)
        throw InputError("checkpoint_every", std::to_string(checkpointEvery),
                         "checkpoints layers only with gradient checkpointing on");
    if (checkpointEvery > 1 && checkpointLayers > 0)
        throw InputError("checkpoint_every", std::to_string(checkpointEvery),
                         "choose one: every k-th layer, or the first N (checkpoint_layers = " +
                             std::to_string(checkpointLayers) + ")");
    if (finetune != FineTune::Full) {
        range("lora_rank", lora.rank, 1, 1 << 16);
        if (lora.targets.empty())
            throw InputError("lora_targets", "(empty)", "LoRA needs at least one target module");
        if (!(lora.dropout >= 0.0 && lora.dropout < 1.0))
            throw InputError("lora_dropout", std::to_string(lora.dropout), "must be in [0, 1)");
    }
    if (hasPreferenceBlock(mode)) {
        const std::string b(toString(mode));
        if (dpo.reference == Reference::Adapter && finetune == FineTune::Full)
            throw InputError(b + ".reference", "adapter", "a disabled adapter needs LoRA or QLoRA: use copy or none");
        if (mode == TrainingMode::ORPO && dpo.reference != Reference::None)
            throw InputError("orpo.reference", std::string(toString(dpo.reference)), "ORPO has no reference model");
        range(b + ".prompt_len", dpo.promptLen, 0, std::max<int64_t>(0, seqLen - 1));
        if (mode == TrainingMode::GRPO)
            validateRollout();
        if (!(dpo.beta >= 0.0 && dpo.beta <= 1e6))
            throw InputError(b + ".beta", std::to_string(dpo.beta), "must be in [0, 1e6]");
    }
    vision.validate();
    if (finetune == FineTune::QLoRA && (precision == Precision::FP32))
        throw Refused({Blocker::QloraInFp32, "precision", "fp32", "QLoRA computes in 16 bits: use bf16, fp16 or amp-bf16"});
}

bool TrainingConfig::Vision::isDefault() const
{
    const Vision d;
    return std::tie(images, imageHeight, imageWidth, maxPixels, minPixels, videos, videoFrames, videoHeight,
                    videoWidth, videoMaxPixels, videoMinPixels, trainTower, trainProjector, trainLanguage) ==
           std::tie(d.images, d.imageHeight, d.imageWidth, d.maxPixels, d.minPixels, d.videos, d.videoFrames,
                    d.videoHeight, d.videoWidth, d.videoMaxPixels, d.videoMinPixels, d.trainTower, d.trainProjector,
                    d.trainLanguage);
}

void TrainingConfig::Vision::validate() const
{
    auto range = [](const std::string &field, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi)
            throw InputError("vision." + field, std::to_string(v),
                             "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    };
    constexpr int64_t side = kMaxSide, pixels = kMaxPixels;
    range("images", images, 0, kMaxImages);
    range("image_height", imageHeight, 1, side);
    range("image_width", imageWidth, 1, side);
    range("max_pixels", maxPixels, 0, pixels);
    range("min_pixels", minPixels, 0, pixels);
    range("videos", videos, 0, kMaxVideos);
    range("video_frames", videoFrames, videos > 0 ? 1 : 0, kMaxFrames);
    range("video_height", videoHeight, 1, side);
    range("video_width", videoWidth, 1, side);
    range("video_max_pixels", videoMaxPixels, 0, pixels);
    range("video_min_pixels", videoMinPixels, 0, pixels);
    if (maxPixels > 0 && minPixels > maxPixels)
        throw InputError("vision.min_pixels", std::to_string(minPixels),
                         "is above max_pixels (" + std::to_string(maxPixels) + ")");
    if (videoMaxPixels > 0 && videoMinPixels > videoMaxPixels)
        throw InputError("vision.video_min_pixels", std::to_string(videoMinPixels),
                         "is above video_max_pixels (" + std::to_string(videoMaxPixels) + ")");
    if (!trainTower && !trainProjector && !trainLanguage)
        throw InputError("vision.train_language_model", "false",
                         "the vision tower and the projector are frozen too: nothing trains");
}

int64_t TrainingConfig::fittingGenerations() const
{
    const int64_t rows = checkedMul(checkedMul(microBatch, gradAccum), worldSize);
    int64_t g = std::min<int64_t>(8, rows);
    while (g > 2 && rows % g != 0)
        --g;
    return std::max<int64_t>(2, g);
}

void TrainingConfig::validateRollout() const
{
    if ((dpo.reference == Reference::None) != (dpo.beta == 0.0))
        throw InputError("grpo.reference", std::string(toString(dpo.reference)),
                         dpo.beta == 0.0 ? "GRPO loads no reference with beta = 0 (TRL's default): use none"
                                         : "GRPO with beta > 0 needs its reference: adapter (LoRA) or copy");
    const int64_t generated = checkedMul(checkedMul(microBatch, gradAccum), worldSize);
    if (generated < 2)
        throw InputError("micro_batch", std::to_string(microBatch),
                         "GRPO compares at least two completions of a prompt, and micro_batch x grad_accum x GPUs is "
                         "1: raise the micro-batch or the accumulation");
    if (grpo.numGenerations < 2 || grpo.numGenerations > (int64_t(1) << 16))
        throw InputError("grpo.num_generations", std::to_string(grpo.numGenerations),
                         "must be in [2, 65536] (GRPO compares at least two completions of a prompt)");
    if (generated % grpo.numGenerations != 0) {
        // The fewest GPUs (up to 64) at this micro-batch and accumulation that make it divide: a
        // recipe that leaves the GPU count to its launch command (open-r1's run on seven).
        std::string hint;
        const int64_t perGpu = checkedMul(microBatch, gradAccum);
        for (int64_t g = 1; g <= 64 && hint.empty(); ++g)
            if (checkedMul(perGpu, g) % grpo.numGenerations == 0)
                hint = "; with " + std::to_string(g) + " GPU" + (g == 1 ? "" : "s") + " it does (--gpus " +
                       std::to_string(g) + ")";
        throw InputError("grpo.num_generations", std::to_string(grpo.numGenerations),
                         "must divide the generation batch (micro_batch x grad_accum x GPUs = " +
                             std::to_string(generated) + "), as TRL requires" + hint);
    }
    if (!(grpo.temperature > 0.0 && grpo.temperature <= 1e6))
        throw InputError("grpo.temperature", std::to_string(grpo.temperature), "must be in (0, 1e6]");
    if (!(grpo.vllmGpuMemoryUtilization > 0.0 && grpo.vllmGpuMemoryUtilization < 1.0))
        throw InputError("grpo.vllm_gpu_memory_utilization", std::to_string(grpo.vllmGpuMemoryUtilization),
                         "must be in (0, 1)");
}

} // namespace headroom
