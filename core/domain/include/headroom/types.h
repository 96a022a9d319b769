#pragma once

#include "headroom/schema.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace headroom {

enum class Precision { FP32, BF16, FP16, AmpBF16, AmpFP16 };
enum class Optimizer { AdamW, AdamW8bit, PagedAdamW8bit, SGD, SGDMomentum, Adafactor, Lion };
enum class OptimizerImpl { Foreach, Fused, ForLoop };
enum class FineTune { Full, LoRA, QLoRA };
// The attention kernel Transformers runs (attn_implementation): SDPA, eager (the s x s scores
// materialised), or a flash kernel (flash-attn 2/3, the Hub's kernels; flex attention is
// estimated as one): See Note [Flash kernels] (docs/estimator.md).
enum class Attention { SDPA, Eager, Flash };
// The causal-LM loss: HF's (lm_head, then cross_entropy over fp32 logits), or a fused linear
// cross-entropy that never materializes the logits (Liger's LigerFusedLinearCrossEntropy).
enum class Loss { Standard, Fused };

// Issue 29: what the step trains. DPO (TRL's DPOTrainer) runs b pairs as one batch of 2b
// sequences (the chosen ones, then the rejected ones; each its prompt, then its completion)
// against a reference: the policy with its adapter disabled, a frozen copy, or none (the
// reference's log-probabilities precomputed).
// GRPO (TRL's GRPOTrainer with use_vllm=False) generates micro_batch x grad_accum completions
// with HF generate before the step's micro-batches, then trains on prompt + completion.
enum class TrainingMode { SFT, DPO, KTO, ORPO, Reward, GRPO };
enum class Reference { Adapter, Copy, None };

// One word per concept across core, probe, GUI and JSON (docs/style.md point 15).
enum class Category {
    Weights,
    Gradients,
    OptimizerState,
    Activations,
    Logits,
    Temporaries,
    Communication,
    AllocatorSlack,
    CudaContext,
    // Issue 29: a frozen reference copy's weights and buffers (DPO, KTO): last, so that the
    // timelines' category numbers stay; written only where it holds bytes.
    ReferenceModel,
};
constexpr int kCategoryCount = 10;
constexpr std::array<Category, kCategoryCount> kAllCategories = {
    Category::Weights,     Category::Gradients,     Category::OptimizerState,
    Category::Activations, Category::Logits,        Category::Temporaries,
    Category::Communication, Category::AllocatorSlack, Category::CudaContext, Category::ReferenceModel};
// The order tables and charts show them in: a reference copy beside the weights it copies.
constexpr std::array<Category, kCategoryCount> kDisplayCategories = {
    Category::Weights,     Category::ReferenceModel, Category::Gradients,     Category::OptimizerState,
    Category::Activations, Category::Logits,         Category::Temporaries,   Category::Communication,
    Category::AllocatorSlack, Category::CudaContext};
// Whether a breakdown writes category `c` holding `bytes`: every category, but the reference
// model only where a step has one (documents without one stay as they were).
inline bool writesCategory(Category c, int64_t bytes) { return c != Category::ReferenceModel || bytes > 0; }

// Issue 29: GRPO's step begins with its generation and (beta > 0) the reference's pass over the
// completions: last, so that the phase numbers of every document stay.
enum class Phase { AfterLoad, Forward, Backward, Optimizer, Generation, Reference };
constexpr int kPhaseCount = 6;
// The phases every step has (estimates and sheets list these).
constexpr std::array<Phase, 4> kAllPhases = {Phase::AfterLoad, Phase::Forward, Phase::Backward, Phase::Optimizer};
// Every phase in the order a step runs them (a measurement lists those it has).
constexpr std::array<Phase, kPhaseCount> kStepOrder = {Phase::AfterLoad, Phase::Generation, Phase::Reference,
                                                      Phase::Forward,   Phase::Backward,   Phase::Optimizer};
// The phases after load, in step order.
constexpr std::array<Phase, kPhaseCount - 1> kStepPhases = {Phase::Generation, Phase::Reference, Phase::Forward,
                                                           Phase::Backward, Phase::Optimizer};

std::string_view toString(Precision);
std::string_view toString(Optimizer);
std::string_view toString(OptimizerImpl);
std::string_view toString(FineTune);
std::string_view toString(Attention);
std::string_view toString(Loss);
std::string_view toString(TrainingMode);
// The mode as prose names it: "DPO", "KTO", "ORPO", "reward-model" ("supervised" for SFT).
std::string modeTitle(TrainingMode);
// DPO, KTO and ORPO: sequences of a prompt then a completion, with beta (and a reference: not ORPO).
// A batch of pairs (chosen then rejected: DPO, ORPO, reward models): micro_batch counts pairs.
inline bool pairedBatch(TrainingMode m)
{
    return m == TrainingMode::DPO || m == TrainingMode::ORPO || m == TrainingMode::Reward;
}
inline bool hasPreferenceBlock(TrainingMode m)
{
    return m == TrainingMode::DPO || m == TrainingMode::KTO || m == TrainingMode::ORPO || m == TrainingMode::GRPO;
}
std::string_view toString(Reference);
std::string_view toString(Category);
std::string_view toString(Phase);
std::string_view describe(Category); // one sentence for tooltips and docs
std::string_view label(Category);    // "Optimizer state": for tables and legends
std::string_view label(Phase);       // "Backward peak"

// Parsers throw InputError naming `field` and the value, and listing what is accepted.
Precision parsePrecision(std::string_view s, const std::string &field = "precision");
Optimizer parseOptimizer(std::string_view s, const std::string &field = "optimizer");
OptimizerImpl parseOptimizerImpl(std::string_view s, const std::string &field = "optimizer_impl");
FineTune parseFineTune(std::string_view s, const std::string &field = "finetune");
Attention parseAttention(std::string_view s, const std::string &field = "attention");
Loss parseLoss(std::string_view s, const std::string &field = "loss");
TrainingMode parseTrainingMode(std::string_view s, const std::string &field = "mode");
Reference parseReference(std::string_view s, const std::string &field = "reference");
Category parseCategory(std::string_view s, const std::string &field = "category");
Phase parsePhase(std::string_view s, const std::string &field = "phase");

// One row per enumerator: the name the CLI, JSON and sheets use, and the explorer's label. The
// combo boxes and the CLI's help are made from these tables (types.cpp), in their order.
template<typename E>
struct EnumRow
{
    E id;
    std::string_view name;
    std::string_view label;
};
const std::vector<EnumRow<Precision>> &precisionTable();
const std::vector<EnumRow<OptimizerImpl>> &optimizerImplTable();
const std::vector<EnumRow<FineTune>> &fineTuneTable();
const std::vector<EnumRow<Attention>> &attentionTable();
// "a | b | c": a table's names, for help text.
template<typename Row>
std::string joinNames(const std::vector<Row> &table)
{
    std::string out;
    for (const auto &r : table)
        out += (out.empty() ? "" : " | ") + std::string(r.name);
    return out;
}

// Everything about an optimizer that is a fact rather than a mechanism, one row per optimizer
// (types.cpp, kOptimizerTable): the CLI's and JSON's name, the explorer's label and tooltip,
// the Hugging Face `optim` names it is read from and written as. Its state layout and its step are
// its file in core/sim/optim/; the LibTorch probe and the transformers engine run it to measure.
struct OptimizerTraits
{
    Optimizer id;
    std::string_view name;      // "adamw-8bit"
    std::string_view label;     // "AdamW 8-bit"
    std::string_view help;      // one sentence: what it keeps
    std::string_view hfOptim;   // TrainingArguments.optim written on export
    std::string_view hfAliases; // space-separated `optim` / Axolotl `optimizer` values read as this one
};
const std::vector<OptimizerTraits> &optimizerTable();
const OptimizerTraits &traits(Optimizer o);

// The names core shares with the transformers engine, list by list in enum order: the engine's
// probes/hrengine/vocabulary.py is generated from it (tests/gen_vocabulary.cpp; ctest
// engine_vocabulary fails when the two differ).
std::vector<std::pair<std::string_view, std::vector<std::string_view>>> sharedVocabulary();

int parameterBytes(Precision p); // storage of weights, gradients and optimizer state
int computeBytes(Precision p);   // activations
bool isAmp(Precision p);

// The Linear layers of a decoder layer, in this order wherever a mask of them is used.
enum class LinearModule { Q, K, V, O, Gate, Up, Down };
constexpr int kLinearModuleCount = 7;
// LoRA targets as users write them (q_proj, qkv_proj, c_attn, w1, all-linear, ...) mapped to the
// modules they adapt. Throws InputError("lora_targets", name) for an unknown name.
std::array<bool, kLinearModuleCount> loraTargetMask(const std::vector<std::string> &targets);

struct LoraConfig
{
    int rank = 16;
    double alpha = 32;
    double dropout = 0.0;
    std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    bool doubleQuant = true; // QLoRA only: bitsandbytes bnb_4bit_use_double_quant
};

// The most gradient-accumulation steps any input may ask for. The estimate allocates every
// micro-batch's input_ids as the engine does (program.cpp), so its time grows with the count;
// 65,536 answers in about a second on two cores (with the recommendations' variants), and no
// recipe accumulates more (a larger value is a typo, or a total batch written as accumulation).
constexpr int64_t kMaxGradAccum = int64_t(1) << 16;

struct TrainingConfig
{
    Precision precision = Precision::BF16;
    Optimizer optimizer = Optimizer::AdamW;
    OptimizerImpl optimizerImpl = OptimizerImpl::Foreach;
    FineTune finetune = FineTune::Full;
    LoraConfig lora;
    int64_t microBatch = 1;
    int64_t seqLen = 2048;
    int64_t gradAccum = 1;
    bool gradCheckpointing = false;
    // Selective checkpointing: with gradCheckpointing, only the first N decoder layers (0: all).
    int64_t checkpointLayers = 0;
    // ... or only every k-th decoder layer (layers 0, k, 2k, ...; 0 or 1: all).
    int64_t checkpointEvery = 0;
    Attention attention = Attention::SDPA;
    Loss loss = Loss::Standard;
    TrainingMode mode = TrainingMode::SFT;
    struct Preference
    {
        Reference reference = Reference::Adapter;
        int64_t promptLen = 0; // tokens of each sequence's prompt; 0: half of seqLen
        double beta = 0.1;
        // ORPO's step: the chosen half's cross-entropy beside the log-probabilities. TRL's
        // CPOTrainer runs the same step with it where cpo_alpha > 0 (CPO) and without it where
        // cpo_alpha = 0 (SimPO as its paper trains): false (Note [ORPO step]).
        bool chosenNll = true;
        int64_t prompt(int64_t seq) const { return promptLen > 0 ? promptLen : seq / 2; }
    } dpo;
    // Issue 29: GRPO's own settings beside the block above (its prompt_len, beta and reference;
    // seqLen is prompt + completion). TRL's GRPOConfig defaults.
    struct Rollout
    {
        int64_t numGenerations = 8; // completions per prompt: divides micro_batch x grad_accum x GPUs
        double temperature = 1.0;
        // use_vllm: generation by vLLM (colocate: in the training process, holding
        // gpu_memory_utilization of the card; server: on other GPUs), not HF generate
        bool vllm = false;
        bool vllmServer = false;
        double vllmGpuMemoryUtilization = 0.3;
    } grpo;
    // Issue 30: a vision-language step's pixels, per sample (Note [Vision inputs]): images and
    // videos at the size the recipe's tool receives them, the tool's pixel bounds (LLaMA-Factory's
    // image_max_pixels, image_min_pixels, video_*: 0, none; the checkpoint's processor bounds are
    // the model's), and which of the three parts train (LLaMA-Factory's freeze_vision_tower,
    // freeze_multi_modal_projector, freeze_language_model defaults). LoRA adapts the trained parts.
    struct Vision
    {
        // The bounds every reader holds them to (validate, the JSON, the CLI).
        static constexpr int64_t kMaxImages = 64, kMaxVideos = 16, kMaxFrames = 4096;
        static constexpr int64_t kMaxSide = int64_t(1) << 15, kMaxPixels = int64_t(1) << 28;
        int64_t images = 0;
        int64_t imageHeight = 448, imageWidth = 448;
        int64_t maxPixels = 0, minPixels = 0;
        int64_t videos = 0, videoFrames = 0;
        int64_t videoHeight = 256, videoWidth = 256;
        int64_t videoMaxPixels = 0, videoMinPixels = 0;
        bool trainTower = false, trainProjector = false, trainLanguage = true;
        bool any() const { return images > 0 || videos > 0; }
        // Every field at its default: a text step (no vision block in its JSON).
        bool isDefault() const;
        void validate() const;
    } vision;
    int worldSize = 1;
    int zeroStage = 0;
    // DeepSpeed offload_optimizer: cpu (ZeRO-Offload): the optimizer state and its step live on
    // the host; the GPU keeps weights and gradients.
    bool offloadOptimizer = false;
    // Activation offload (torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward):
    // every tensor autograd saves goes to pinned host memory, and comes back when backward
    // unpacks it.
    bool activationOffload = false;
    // Whether decoder layer `layer` of `numLayers` recomputes its forward in backward.
    bool checkpointed(int64_t layer) const
    {
        return gradCheckpointing && (checkpointLayers <= 0 || layer < checkpointLayers) &&
               (checkpointEvery <= 1 || layer % checkpointEvery == 0);
    }
    // Every layer checkpointed, or none: the per-op ledger knows only these.
    bool checkpointingUniform(int64_t numLayers) const
    {
        return !gradCheckpointing ||
               ((checkpointLayers <= 0 || checkpointLayers >= numLayers) && (checkpointEvery <= 1 || numLayers <= 1));
    }

    int64_t tokens() const { return microBatch * seqLen; }
    // Throws InputError on the first out-of-range field.
    void validate() const;
    // GRPO's settings, as GRPOConfig.__post_init__ checks them (validate calls it for GRPO).
    void validateRollout() const;
    // TRL's defaults where a file or the command line does not say: beta (GRPOConfig's 0, the
    // preference configs' 0.1), and the reference for this mode, beta and fine-tuning (none for
    // ORPO and for GRPO at beta 0; the disabled adapter under PEFT; a frozen copy in full
    // fine-tuning). One place for the CLI, the imports, the sheets' JSON and the explorer.
    static double defaultBeta(TrainingMode m) { return m == TrainingMode::GRPO ? 0.0 : 0.1; }
    Reference defaultReference() const
    {
        if (mode == TrainingMode::ORPO || (mode == TrainingMode::GRPO && dpo.beta == 0.0))
            return Reference::None;
        return finetune == FineTune::Full ? Reference::Copy : Reference::Adapter;
    }
    // GRPO's completions a prompt where none is given: GRPOConfig's 8, or the most below it that
    // divide the generation batch (at least 2; the count changes nothing on the device).
    int64_t fittingGenerations() const;
};

} // namespace headroom
