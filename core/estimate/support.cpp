// What can be estimated and measured, decided here and nowhere else (headroom/support.h).

#include "headroom/support.h"
#include "headroom/vision.h"

#include "headroom/estimator.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace headroom {

bool isSimulated(const TrainingConfig &cfg)
{
    // FSDP2 (ZeRO-2/3) is simulated unit by unit (sim/parallel/fsdp2.cpp); QLoRA's Params4bit
    // under FSDP2 is not.
    return !cfg.offloadOptimizer && (cfg.zeroStage <= 1 || cfg.finetune != FineTune::QLoRA);
}

bool traceAnswers(Blocker blocker)
{
    return blocker == Blocker::ExpertsLoraAllLinear || blocker == Blocker::ExpertsLoraPrecision ||
           blocker == Blocker::RowVariant;
}

namespace {

// Issue 29: the post-training modes are simulated as TRL runs them (See Note [DPO step], Note
// [KTO step], Note [ORPO step], Note [Reward step]) where they were measured: one GPU, LoRA or
// full fine-tuning. Elsewhere they are refused by name, never estimated as supervised
// fine-tuning; the refusal says whether Measure now runs the step (the engine measures DPO with
// QLoRA, no mode with TRL's fused loss).
std::optional<Refusal> postTrainingRefusal(const TrainingConfig &cfg)
{
    if (cfg.mode == TrainingMode::SFT)
        return std::nullopt;
    if (cfg.mode == TrainingMode::GRPO)
        return std::nullopt; // grpoRefusal, which needs the model
    const bool withReference = cfg.mode == TrainingMode::DPO || cfg.mode == TrainingMode::KTO;
    const bool copyWithAdapters = withReference && cfg.dpo.reference == Reference::Copy && cfg.finetune != FineTune::Full;
    const bool fused = cfg.loss == Loss::Fused;
    // QLoRA composes: its 4-bit base and fp32 casts (measured under SFT) under the mode's passes
    // (measured with LoRA); the combination is predicted (stepNotes says so) until a real step holds it.
    const char *gap = cfg.activationOffload        ? "activation offload"
                      : copyWithAdapters             ? "adapters and a reference copy"
                      : fused                        ? "the fused loss (TRL's use_liger_kernel: Liger's fused linear loss, no logits)"
                      : cfg.worldSize > 1 || cfg.zeroStage > 0 || cfg.offloadOptimizer ? "several GPUs or ZeRO"
                                                                                        : nullptr;
    if (!gap)
        return std::nullopt;
    const bool measured = !fused;
    const std::string what = cfg.mode == TrainingMode::Reward ? std::string("a reward model") : modeTitle(cfg.mode);
    return Refusal{Blocker::PreferenceNotModelled, fused ? "loss" : "mode",
                   fused ? std::string("fused") : std::string(toString(cfg.mode)),
                   what + " is estimated on one GPU with LoRA or QLoRA" +
                       (withReference ? " (the adapter disabled as the reference) or full fine-tuning (a frozen copy, or none)"
                                      : " or full fine-tuning") +
                       ", as measured; with " + gap +
                       (measured ? " it is not yet: Measure now runs TRL's own " + modeTitle(cfg.mode) + " step"
                                 : std::string(" it is neither estimated nor measured yet"))};
}

// Issue 29: GRPO is simulated as TRL's GRPOTrainer runs it with use_vllm = false (See Note [GRPO
// step]): HF generate's DynamicCache on a decoder whose every layer attends to the whole sequence,
// in 16 bits, on one GPU, with LoRA or full fine-tuning. Elsewhere refused by what is missing.
std::optional<Refusal> grpoRefusal(const ModelArch &model, const TrainingConfig &cfg)
{
    const auto refuse = [](const std::string &field, const std::string &value, const std::string &why) {
        return Refusal{Blocker::PreferenceNotModelled, field, value, why};
    };
    const bool sixteen = cfg.precision == Precision::BF16 || cfg.precision == Precision::FP16;
    const char *gap = cfg.finetune == FineTune::QLoRA ? "QLoRA"
                      : !sixteen                      ? "this precision (it is estimated in bf16 or fp16: generate "
                                                        "runs outside autocast, and TRL's log-softmax is its 16-bit one)"
                      : cfg.activationOffload         ? "activation offload"
                      : cfg.loss == Loss::Fused       ? "the fused loss (TRL's use_liger_kernel)"
                      : cfg.worldSize > 1 || cfg.zeroStage > 0 || cfg.offloadOptimizer ? "several GPUs or ZeRO"
                      : cfg.attention == Attention::Eager ? "eager attention"
                      : cfg.gradCheckpointing && !cfg.checkpointingUniform(model.numLayers)
                          ? "selective checkpointing (TRL turns checkpointing back on for every layer after generating)"
                          : nullptr;
    if (gap)
        return refuse("mode", "grpo",
                      "GRPO is estimated on one GPU in bf16 or fp16 with LoRA or full fine-tuning, as measured; with " +
                          std::string(gap) + " it is not yet: Measure now runs TRL's own GRPO step");
    const nlohmann::json &hc = model.hfConfig;
    const bool sliding = hc.is_object() && hc.contains("sliding_window") && hc.at("sliding_window").is_number_integer() &&
                         hc.at("sliding_window").get<int64_t>() > 0 &&
                         !(hc.contains("use_sliding_window") && hc.at("use_sliding_window").is_boolean() &&
                           !hc.at("use_sliding_window").get<bool>());
    const char *cache = model.isMla()                ? "multi-head latent attention's cache"
                        : model.hasLinearAttention() ? "the linear-attention layers' recurrent state"
                        : model.hasPerLayerInputs() || !model.globalLayers.empty() ? "Gemma 4's shared key-value cache"
                        : sliding                    ? "a sliding-window cache"
                                                     : nullptr;
    if (cache)
        return refuse("model.model_type", model.modelType,
                      "GRPO's generation is estimated with the DynamicCache of layers that attend to the whole "
                      "sequence; " + model.modelType + "'s " + cache +
                          " is not yet: Measure now runs TRL's own GRPO step");
    return std::nullopt;
}

// Issue 30: a vision-language step is estimated where its tower's forward is simulated (Note
// [Vision step]) and as measured: the tower and projector frozen, the language model trained in
// full or with LoRA, on one GPU in bf16, supervised. Elsewhere refused by what is missing.
std::optional<Refusal> visionRefusal(const ModelArch &model, const TrainingConfig &cfg, const VisionTokens &vt)
{
    const FamilyTraits &ft = familyTraitsOrLlama(model.modelType);
    if (!ft.visionLanguage)
        return std::nullopt;
    const std::string measureNow = ": Measure now runs it with the transformers engine";
    if (!ft.visionTowerSimulated)
        return Refusal{Blocker::VisionLanguage, "model.model_type", model.modelType,
                       model.modelType + "'s vision-language step (its vision tower, projector and image tokens) is "
                       "measured, not yet estimated" + measureNow};
    const auto refuse = [&](const std::string &field, const std::string &value, const std::string &what) {
        return Refusal{Blocker::VisionLanguage, field, value,
                       model.modelType + "'s vision-language step is estimated with its vision tower and projector "
                       "frozen, on one GPU in bf16, supervised, as measured; " + what + " is not yet" + measureNow};
    };
    // Trained in full fine-tuning: every simulated tower and projector; LoRA on Qwen2.5-VL's tower
    if (visionLoraUnsimulated(model, cfg)) // Note [Vision LoRA]: Qwen2.5-VL's tower only
        return refuse("vision.train_vision_tower", "true", "LoRA on this vision tower");

    // Gradient checkpointing's input hook reaches Qwen2.5-VL's patch_embed too: the tower then runs
    // in the autograd graph, every block checkpointed and its input held to backward (the H100
    // timeline of q25vl-full-ckpt-1img1344-b1s4096; simulated, its merger frozen); Qwen3-VL's tower
    // is not hooked

    if (!cfg.vision.trainLanguage)
        return refuse("vision.train_language_model", "false", "a frozen language model");
    if (cfg.finetune == FineTune::QLoRA)
        return refuse("finetune", "qlora", "QLoRA");
    if (cfg.mode != TrainingMode::SFT)
        return refuse("mode", std::string(toString(cfg.mode)), modeTitle(cfg.mode));
    if (cfg.precision != Precision::BF16)
        return refuse("precision", std::string(toString(cfg.precision)), "this precision");
    if (cfg.worldSize > 1) // named by what the configuration sets: the GPUs, else ZeRO or FSDP's stage, else the offload
        return refuse("gpus", std::to_string(cfg.worldSize), "several GPUs");
    if (cfg.zeroStage > 0)
        return refuse("zero", std::to_string(cfg.zeroStage), "ZeRO or FSDP sharding");
    if (cfg.offloadOptimizer)
        return refuse("offload_optimizer", "true", "optimizer offload");
    if (cfg.attention == Attention::Eager)
        return refuse("attention", "eager", "eager attention");

    if (cfg.activationOffload)
        return refuse("activation_offload", "true", "activation offload");
    if (cfg.loss == Loss::Fused)
        return refuse("loss", "fused", "the fused loss");
    // The tower is simulated a window of attention at a time (about 64 patches): past 4,194,304
    // patches a micro-batch (a million image tokens) the simulation would run for minutes.
    const int64_t patches = checkedMul(checkedAdd(checkedMul(cfg.vision.images, vt.imagePatches),
                                                  checkedMul(cfg.vision.videos, vt.videoPatches)),
                                       cfg.microBatch);
    if (patches > (int64_t(1) << 22))
        return Refusal{Blocker::VisionLanguage, "vision.images", std::to_string(cfg.vision.images),
                       "the micro-batch's pixels make " + std::to_string(patches) +
                           " vision-tower patches, past the 4194304 the estimate simulates: fewer or smaller images, "
                           "a smaller micro-batch, or Measure now"};
    return std::nullopt;
}

// See Note [Flash kernels] (docs/estimator.md): flash-attn runs fp16 and bf16 only (Transformers
// casts fp32 inputs to autocast's dtype, else to the weights' dtype, and the kernel raises for
// fp32), and heads up to 256 wide.
std::optional<Refusal> flashRefusal(const ModelArch &model, const TrainingConfig &cfg)
{
    if (cfg.attention != Attention::Flash)
        return std::nullopt;
    if (cfg.precision == Precision::FP32)
        return Refusal{Blocker::FlashKernel, "precision", "fp32",
                       "a flash kernel runs fp16 or bf16 only (flash-attn raises for fp32 without autocast): use "
                       "amp-bf16, bf16, or --attention sdpa"};
    const int64_t widest = std::max({model.headDim, model.globalHeadDim, model.qkNopeDim + model.qkRopeDim, model.vHeadDim});
    if (widest > 256)
        return Refusal{Blocker::FlashKernel, "attention", "flash",
                       model.modelType + "'s heads are " + std::to_string(widest) +
                           " wide, past the 256 flash-attn takes: use --attention sdpa"};
    return std::nullopt;
}

} // namespace

std::optional<Refusal> estimateRefusal(const ModelArch &model, const TrainingConfig &cfg)
{
    // Issue 30: the pixels are checked first (a bad size is an input error, whatever runs it)
    const VisionTokens vt = visionTokens(model, cfg);
    if (auto no = visionRefusal(model, cfg, vt))
        return no;
    if (auto no = postTrainingRefusal(cfg))
        return no;
    if (cfg.mode == TrainingMode::GRPO)
        if (auto no = grpoRefusal(model, cfg))
            return no;
    if (model.rowGap)
        return Refusal{Blocker::RowVariant, "config." + model.rowGap->field, model.rowGap->value,
                       model.modelType + "'s row does not follow " + model.rowGap->reason};
    if (familyTraitsOrLlama(model.modelType).eagerNotModelled && cfg.attention == Attention::Eager)
        return Refusal{Blocker::RowVariant, "attention", "eager",
                       model.modelType + "'s row follows its SDPA attention, not its own eager one"};
    // GPT-OSS's attention sinks: Transformers refuses SDPA for the type (_supports_sdpa = False);
    // they run in eager attention or a flash kernel that takes the sinks (the Hub's
    // vllm-flash-attn3, which Axolotl's gpt-oss recipes name): See Note [Flash kernels].
    if (familyTraitsOrLlama(model.modelType).attentionSinks && cfg.attention == Attention::SDPA)
        return Refusal{Blocker::EagerAttentionOnly, "attention", "sdpa",
                       model.modelType + "'s attention sinks run in eager attention or a flash kernel (the Hub's "
                                         "vllm-flash-attn3), never SDPA: use --attention eager or flash"};
    if (auto no = flashRefusal(model, cfg))
        return no;
    // Learned absolute positions (GPT-2's wpe, an nn.Embedding of max_position_embeddings rows):
    // Transformers fails with an index error past them, so there is no run to estimate.
    if (model.learnedPositions && model.maxPositions > 0 && cfg.seqLen > model.maxPositions)
        return Refusal{Blocker::PastLearnedPositions, "seq", std::to_string(cfg.seqLen),
                         model.name + " learns one position embedding per position: at most max_position_embeddings = " +
                             std::to_string(model.maxPositions) + " tokens (Transformers fails past it)"};
    // See Note [Experts ParamWrapper] (docs/estimator.md).
    // PEFT wraps the stacked expert weights of Qwen3-MoE and DeepSeek-V2/V3 in ParamWrappers when
    // LoRA names the MLP projections (model.h expertsLora; simulated in program.cpp, measured in
    // bf16 on one GPU). What was not measured is refused rather than guessed.
    if (cfg.finetune != FineTune::Full && familyTraitsOrLlama(model.modelType).expertsWrappedByPeft && model.isMoe()) {
        const ExpertsLora el = expertsLora(model, cfg.lora.targets);
        const bool allLinear =
            std::find(cfg.lora.targets.begin(), cfg.lora.targets.end(), "all-linear") != cfg.lora.targets.end();
        if (allLinear)
            return Refusal{Blocker::ExpertsLoraAllLinear, "lora.targets", "all-linear",
                           "all-linear on " + model.modelType + " also puts LoRA on the router, which the rows do "
                           "not model; name the modules (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)"};
        if (el.partial)
            return Refusal{Blocker::ExpertsLoraHalfGateUp, "lora.targets", "gate_proj/up_proj",
                           model.modelType + " fuses gate and up in one experts.gate_up_proj: name both or neither"};
        if (el.any()) {
            auto refuse = [&](Blocker blocker, const char *field, const std::string &value, const std::string &why) {
                return Refusal{blocker, field, value, "LoRA on " + model.modelType + "'s experts (PEFT ParamWrapper) " + why};
            };
            if (cfg.lora.dropout > 0)
                return refuse(Blocker::ExpertsLoraDropout, "lora.dropout",
                              [&] { std::ostringstream o; o << cfg.lora.dropout; return o.str(); }(),
                              "needs lora_dropout 0: PEFT raises for any other value");
            if (cfg.finetune == FineTune::QLoRA)
                return refuse(Blocker::ExpertsLoraQlora, "finetune", "qlora",
                              "under QLoRA was not measured; use LoRA, or target the attention only");
            if (parameterBytes(cfg.precision) != 2 || isAmp(cfg.precision))
                return refuse(Blocker::ExpertsLoraPrecision, "precision", std::string(toString(cfg.precision)),
                              "was measured in bf16 only (the factors are cast to the experts' dtype); use bf16 or fp16");
            if (cfg.zeroStage >= 2 || cfg.offloadOptimizer)
                return refuse(Blocker::ExpertsLoraSharded, cfg.offloadOptimizer ? "offload_optimizer" : "zero",
                              cfg.offloadOptimizer ? "true" : std::to_string(cfg.zeroStage),
                              "was measured on one GPU; it is estimated there, with DDP and with ZeRO-1, not with FSDP "
                              "(parametrized DTensors) or optimizer offload");
        }
    }
    // Selective checkpointing is simulated layer by layer; the ledger composes identical layers.
    if (!isSimulated(cfg) && !cfg.checkpointingUniform(model.numLayers))
        return Refusal{Blocker::LedgerSelectiveCheckpointing, "checkpoint_layers", std::to_string(cfg.checkpointLayers),
                       "checkpointing some layers is estimated on one GPU, DDP and ZeRO-1; with FSDP or "
                       "optimizer offload only all layers or none"};
    // Activation offload is simulated op by op (autograd.h setSavedToHost); the ledger has no
    // saved-tensor hooks.
    if (cfg.activationOffload && !isSimulated(cfg))
        return Refusal{Blocker::LedgerActivationOffload, "activation_offload", "true",
                       "activation offload is estimated on one GPU, DDP and ZeRO-1; not yet with FSDP (ZeRO 2/3) "
                       "or optimizer offload"};
    // Multi-head latent attention is simulated op by op; the per-op ledger (FSDP, optimizer
    // offload) has no MLA yet.
    if (model.isMla() && !isSimulated(cfg))
        return Refusal{Blocker::LedgerMla, "model.model_type", model.modelType,
                       "multi-head latent attention is estimated on one GPU, DDP and ZeRO-1; not yet with FSDP "
                       "(ZeRO 2/3) or optimizer offload"};
    // Qwen3.5's gated DeltaNet is simulated op by op (Note [Gated DeltaNet]) as measured: in 16 or
    // 32 bits, without autocast, whose lower-precision matmuls and casts in the delta rule were not
    // measured (the traced estimate answers); the per-op ledger has no DeltaNet.
    if (model.hasLinearAttention() && isAmp(cfg.precision))
        return Refusal{Blocker::RowVariant, "precision", std::string(toString(cfg.precision)),
                       model.modelType + "'s row follows its gated DeltaNet in bf16, fp16 or fp32; under autocast it "
                                         "is traced"};
    if (model.hasLinearAttention() && !isSimulated(cfg))
        return Refusal{Blocker::LedgerLayerKinds, "model.model_type", model.modelType,
                       "the gated DeltaNet is estimated on one GPU, DDP and ZeRO-1; not yet with FSDP (ZeRO 2/3) "
                       "or optimizer offload"};
    // Gemma 4's global layers and per-layer inputs are simulated op by op (Note [Gemma 4]); the
    // per-op ledger composes identical layers.
    if ((!model.globalLayers.empty() || model.hasPerLayerInputs()) && !isSimulated(cfg))
        return Refusal{Blocker::LedgerLayerKinds, "model.model_type", model.modelType,
                       "Gemma 4's global layers and per-layer inputs are estimated on one GPU, DDP and ZeRO-1; not "
                       "yet with FSDP (ZeRO 2/3) or optimizer offload"};
    // PEFT's get_peft_model raises when no target module is found in the model ("Target modules
    // {...} not found in the base model"); an estimate of that run would have no adapters at all.
    if (cfg.finetune != FineTune::Full) {
        const auto on = loraAdaptedModules(model, cfg.lora.targets);
        const auto la = linearAttentionLora(model, cfg.lora.targets);
        const auto pli = perLayerInputLora(model, cfg.lora.targets);
        const auto mla = mlaLora(model, cfg.lora.targets);
        if (std::none_of(on.begin(), on.end(), [](bool b) { return b; }) && !expertsLora(model, cfg.lora.targets).any() &&
            std::none_of(la.begin(), la.end(), [](bool b) { return b; }) &&
            std::none_of(pli.begin(), pli.end(), [](bool b) { return b; }) &&
            std::none_of(mla.begin(), mla.end(), [](bool b) { return b; })) {
            std::string targets, names;
            for (const auto &t : cfg.lora.targets)
                targets += (targets.empty() ? "" : ",") + t;
            std::set<std::string> seen;
            for (const auto &n : linearModuleNames(model))
                if (!n.empty() && seen.insert(n).second)
                    names += (names.empty() ? "" : ", ") + n;
            if (model.hasLinearAttention())
                for (const auto &n : linearAttentionLinearNames())
                    names += ", " + n;
            if (model.hasPerLayerInputs())
                for (const auto &n : perLayerInputLinearNames())
                    names += ", " + n;
            const auto mlaPresent = mlaLora(model, {"all-linear"}); // the MLA Linears this model has
            for (size_t i = 0; i < mlaPresent.size(); ++i)
                if (mlaPresent[i])
                    names += ", " + mlaLinearNames()[i];
            return Refusal{Blocker::LoraTargetsNotFound, "lora.targets", targets,
                           "none is a Linear module of " + model.modelType + ", so PEFT would refuse the run; its "
                           "Linear modules are " + names + " (or all-linear)"};
        }
    }
    return std::nullopt;
}

std::optional<Refusal> libtorchRefusal(const ModelArch &m, const TrainingConfig &c)
{
    if (c.vision.any() || familyTraitsOrLlama(m.modelType).visionLanguage)
        return Refusal{Blocker::EngineVision, "model.model_type", m.modelType,
                       "a vision-language step runs on the transformers engine: use --engine transformers"};
    if (c.mode != TrainingMode::SFT)
        return Refusal{Blocker::EngineMode, "config.mode", std::string(toString(c.mode)),
                       "a " + modeTitle(c.mode) + " step is TRL's own loss: use --engine transformers with TRL installed"};
    const FamilyTraits &ft = familyTraitsOrLlama(m.modelType);
    const bool known = ft.modelType == m.modelType && ft.libtorchEngine;
    if (!known || m.isMoe() || m.fusedQkv || m.fusedGateUp || m.norm != NormKind::RMSNorm)
        return Refusal{Blocker::EngineModel, "model.model_type", m.modelType,
                       "the LibTorch engine follows Llama-style modeling only (llama, mistral, qwen2, qwen3); "
                       "use --engine transformers"};
    const nlohmann::json &hc = m.hfConfig;
    if (hc.is_object() && hc.contains("sliding_window") && hc.at("sliding_window").is_number_integer()) {
        const int64_t window = hc.at("sliding_window").get<int64_t>();
        const bool slides = !ft.slidingWindowOptIn ||
                            (hc.contains("use_sliding_window") && hc.at("use_sliding_window").is_boolean() &&
                             hc.at("use_sliding_window").get<bool>());
        if (slides && window > 0 && c.seqLen >= window)
            return Refusal{Blocker::EngineSlidingWindow, "config.seq_len", std::to_string(c.seqLen), "at or past the sliding window (" + std::to_string(window) +
                                                 ") HF masks attention explicitly, which the LibTorch engine does not "
                                                 "reproduce; use --engine transformers"};
    }
    if (c.gradAccum > 1)
        return Refusal{Blocker::EngineGradAccum, "config.grad_accum", std::to_string(c.gradAccum), "the LibTorch engine measured 10.5% under the real stack with gradient "
                                            "accumulation; use --engine transformers"};
    if (c.loss == Loss::Fused && (c.precision == Precision::AmpBF16 || c.precision == Precision::AmpFP16))
        return Refusal{Blocker::EngineFusedLossAmp, "config.loss", "fused", "the LibTorch engine's fused loss runs without autocast (Liger's fp32 "
                                               "accumulator path needs addmm's out_dtype); use bf16, fp16 or fp32, or "
                                               "--engine transformers with liger-kernel installed"};
    if (c.finetune == FineTune::QLoRA && isAmp(c.precision))
        return Refusal{Blocker::EngineQloraAmp, "config.precision", std::string(toString(c.precision)),
                       "QLoRA under autocast runs Linear4bit in fp32 with autocast's casts inside bitsandbytes, "
                       "which the LibTorch engine does not follow; use bf16 or fp16, or --engine transformers"};
    if (c.optimizer == Optimizer::PagedAdamW8bit)
        return Refusal{Blocker::EnginePagedOptimizer, "config.optimizer", "paged-adamw-8bit", "paged optimizer state lives in CUDA managed memory, "
                                                                "which the LibTorch engine does not make; use "
                                                                "--engine transformers with bitsandbytes installed"};
    if (c.activationOffload)
        return Refusal{Blocker::EngineActivationOffload, "config.activation_offload", "true", "the LibTorch engine has no saved-tensor hooks to move "
                                                            "activations to the host; use --engine transformers"};
    if (c.zeroStage > 0)
        return Refusal{Blocker::EngineSharding, "config.zero_stage", std::to_string(c.zeroStage), "ZeRO/FSDP sharding is measured with the real FSDP2 and "
                                            "ZeroRedundancyOptimizer: use --engine transformers"};
    return std::nullopt;
}

std::optional<QuickFix> quickFix(const ModelArch &m, const TrainingConfig &c, const Refusal &why,
                                 const EstimatorOptions &opt)
{
    const Blocker blocker = why.blocker;
    QuickFix f;
    f.config = c;
    const bool targetsRefused = blocker == Blocker::ExpertsLoraAllLinear || blocker == Blocker::ExpertsLoraHalfGateUp ||
                                blocker == Blocker::LoraTargetsNotFound;
    if (targetsRefused && c.finetune != FineTune::Full) {
        // The attention's Linears the model has (q/k/v/o, or its fused qkv).
        std::vector<std::string> targets;
        const auto names = linearModuleNames(m);
        for (LinearModule mod : {LinearModule::Q, LinearModule::K, LinearModule::V, LinearModule::O}) {
            const std::string &n = names[static_cast<size_t>(mod)];
            if (!n.empty() && std::find(targets.begin(), targets.end(), n) == targets.end())
                targets.push_back(n);
        }
        if (targets.empty() || targets == c.lora.targets)
            return std::nullopt;
        std::string list;
        for (const auto &t : targets)
            list += (list.empty() ? "" : ", ") + t;
        f.title = "LoRA on the attention only (" + list + ")";
        f.config.lora.targets = targets;
    } else if (blocker == Blocker::QloraInFp32 && c.finetune == FineTune::QLoRA && c.precision == Precision::FP32) {
        f.title = "Compute in bf16 (QLoRA computes in 16 bits)";
        f.config.precision = Precision::BF16;
    } else if (blocker == Blocker::PastLearnedPositions && m.learnedPositions && m.maxPositions > 0 && c.seqLen > m.maxPositions) {
        f.title = "Sequence " + std::to_string(m.maxPositions) + " (the model's learned positions end there)";
        f.config.seqLen = m.maxPositions;
    } else if (blocker == Blocker::EagerAttentionOnly && c.attention == Attention::SDPA) {
        f.title = "Eager attention (" + m.modelType + "'s attention sinks have no SDPA path)";
        f.config.attention = Attention::Eager;
    } else if (blocker == Blocker::FlashKernel && c.attention == Attention::Flash) {
        f.title = "SDPA attention (the flash kernel cannot run this configuration)";
        f.config.attention = Attention::SDPA;
    } else if (blocker == Blocker::LedgerMla && m.isMla() && c.finetune == FineTune::QLoRA) {
        f.title = "LoRA instead of QLoRA (multi-head latent attention with QLoRA is not estimated yet)";
        f.config.finetune = FineTune::LoRA;
    } else {
        return std::nullopt;
    }
    try {
        (void)estimate(m, f.config, opt);
    } catch (const InputError &) {
        return std::nullopt; // the fix alone is not enough: say nothing rather than offer a dead end
    }
    return f;
}

std::optional<QuickFix> quickFix(const ModelArch &m, const TrainingConfig &c, const InputError &error,
                                 const EstimatorOptions &opt)
{
    const auto *refused = dynamic_cast<const Refused *>(&error);
    return refused ? quickFix(m, c, refused->refusal(), opt) : std::nullopt;
}

} // namespace headroom
