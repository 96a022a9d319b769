// Notes on the mechanisms in play that a user may not expect, for the estimate's report.

#include "step.h"

#include "headroom/vision.h"

#include <algorithm>
#include <cstdio>

namespace headroom::est {

std::vector<std::string> stepNotes(const Ctx &x, const Estimate &est)
{
    const TrainingConfig &cfg = x.cfg;
    const ModelArch &model = x.m;
    const int zero = cfg.zeroStage;
    std::vector<std::string> notes;
    // Notes on mechanisms the user may not expect.
    if (!x.full)
        notes.push_back("PEFT keeps LoRA adapters in fp32 and casts each adapter's input to fp32; those copies "
                          "are saved for backward");
    if (cfg.offloadOptimizer)
    {
        char gib[32];
        std::snprintf(gib, sizeof gib, "%.2f GiB", static_cast<double>(est.params.hostOptimizerStateBytes) / 1073741824.0);
        notes.push_back(std::string("the optimizer state (") + gib +
                          " per rank) and its step run on the CPU; the host needs that much pinned memory");
    }
    if (x.qlora && cfg.zeroStage < 2)
        notes.push_back("QLoRA as PEFT prepares it (prepare_model_for_kbit_training) casts every parameter that is "
                          "not 4-bit to fp32 (embeddings, norms, lm_head), so the activations and logits are fp32: "
                          "twice bf16 LoRA's; the 4-bit base saves weight memory only");
    if (est.params.pagedOptimizerStateBytes > 0) {
        char gib[32];
        std::snprintf(gib, sizeof gib, "%.2f GiB", static_cast<double>(est.params.pagedOptimizerStateBytes) / 1073741824.0);
        notes.push_back(std::string("the paged optimizer keeps ") + gib +
                          " of moments in CUDA managed memory, outside PyTorch's allocator: nvidia-smi counts it "
                          "while it is on the GPU, and under memory pressure the driver pages it to host RAM "
                          "(a slower step, not an OOM); it is not in the totals here");
    }
    if (model.maxPositions > 0 && cfg.seqLen > model.maxPositions)
        notes.push_back("sequence length " + std::to_string(cfg.seqLen) + " is above the model's "
                          "max_position_embeddings (" + std::to_string(model.maxPositions) +
                          "): it was not trained for it (rope_scaling, or a shorter sequence)");
    // See Note [Flash kernels] (docs/estimator.md).
    if (cfg.attention == Attention::Flash)
        notes.push_back(std::string("a flash kernel keeps what SDPA's flash kernel keeps (q, k, v, the output, its fp32 "
                                    "log-sum-exp) and no mask: estimated with the buffers measured for SDPA's, the "
                                    "flash-attn package itself not measured") +
                        (cfg.vision.any() ? "; the vision tower's attention as its SDPA calls" : ""));
    if (x.amp)
        notes.push_back("autocast keeps a bf16 copy of every Linear weight until backward, and the residual "
                          "stream stays fp32");
    if (x.mixedPrecisionPolicy)
        notes.push_back("FSDP2's MixedPrecisionPolicy gathers the parameters in bf16 and casts each unit's inputs: "
                          "the step runs in bf16 over fp32 shards, gradients and optimizer state");
    if (zero >= 2 && isSimulated(cfg))
        notes.push_back("FSDP2 as accelerate runs it: the model built on the CPU and moved to the GPU unit by unit; "
                          "its all-gathers and reduce-scatters keep their own blocks on side streams, which the "
                          "compute stream cannot reuse (reserved is counted per stream)");
    else if (zero >= 2)
        notes.push_back("ZeRO-2/3 with " + std::string(cfg.offloadOptimizer ? "optimizer offload" : "QLoRA") +
                          " goes through the per-op ledger: peak allocated as the layers compose it, reserved as "
                          "allocated plus the median slack (FSDP2's side streams are not replayed); keep headroom, "
                          "or measure with --engine transformers");
    // SDPA has no fp32 flash kernel, and memory-efficient attention no enable_gqa.
    if (cfg.attention == Attention::SDPA && x.c == 4 && model.numKvHeads < model.numHeads)
        notes.push_back("fp32 with grouped-query attention: SDPA falls back to the math kernel, which keeps "
                        "the s x s probabilities");
    // See Note [SDPA math path in fp32] (docs/estimator.md).
    if (cfg.attention == Attention::SDPA && x.c != 4 && model.numKvHeads < model.numHeads &&
        familyTraitsOrLlama(model.modelType).sdpaExplicitMask) {
        char gib[32];
        const double perLayer = 4.0 * static_cast<double>(cfg.microBatch) * static_cast<double>(model.numHeads) *
                                static_cast<double>(cfg.seqLen) * static_cast<double>(cfg.seqLen) / 1073741824.0;
        std::snprintf(gib, sizeof gib, "%.2f GiB", perLayer);
        notes.push_back(model.modelType + " hands SDPA its causal mask and one key/value head, so PyTorch runs the math "
                        "path in fp32: each layer keeps its s x s probabilities in fp32 for backward (" + gib +
                        " per layer here); gradient checkpointing keeps one layer's at a time");
    }
    // See Note [Gated DeltaNet] (docs/estimator.md).
    if (model.hasLinearAttention())
        notes.push_back(model.modelType + "'s linear-attention layers are estimated as Transformers runs them without "
                        "flash-linear-attention and causal-conv1d (its torch fallback keeps each 64-token chunk's "
                        "fp32 tensors and every recurrent state for backward); with those installed Transformers "
                        "calls their kernels instead (not measured here): Measure now runs your own stack");
    if (!model.visionBuild.empty()) // Note [Vision build]
        notes.push_back(model.name + " is the checkpoint's language model alone, as AutoModelForCausalLM builds it; "
                        "a loader that builds the whole checkpoint (LLaMA-Factory, TRL, a processor recipe) holds its "
                        "vision tower too, and images: estimate " + model.visionBuild + " for that");
    // What is predicted rather than held by a real step. DPO with QLoRA is measured
    // (tests/data/h200/posttrain-2026-12-06: its fp32 logits take TRL's fp32 log-softmax), and so is
    // GRPO's generation with its KV cache; the engine does not yet run the other modes with QLoRA.
    if (x.qlora && cfg.mode != TrainingMode::SFT && cfg.mode != TrainingMode::GRPO && cfg.mode != TrainingMode::DPO)
        notes.push_back(modeTitle(cfg.mode) + " with QLoRA composes QLoRA's 4-bit base and fp32 casts (measured in "
                        "supervised fine-tuning) with " + modeTitle(cfg.mode) + "'s passes (measured with LoRA); the two "
                        "together are predicted: the transformers engine measures " + modeTitle(cfg.mode) +
                        " with LoRA or full fine-tuning, not yet with QLoRA");
    if (const int64_t n = visionParameterCount(model); n > 0) {
        char share[64];
        std::snprintf(share, sizeof share, "%.2f B parameters, %.2f GiB", static_cast<double>(n) / 1e9,
                      static_cast<double>(n) * x.p / 1073741824.0);
        const bool deepstack = !model.vision.tower.deepstack.empty();
        const bool tower = cfg.vision.trainTower && cfg.finetune == FineTune::Full,
                   projector = cfg.vision.trainProjector && cfg.finetune == FineTune::Full;
        const VisionLora lora = visionLora(model, cfg); // Note [Vision LoRA]
        const std::string state =
            lora.any() ? "frozen under LoRA adapters on " + std::to_string(lora.adapters()) + " of their Linears"
            : cfg.finetune != FineTune::Full && cfg.vision.trainTower
                ? std::string("frozen (the LoRA targets name none of the tower's Linears, so PEFT adapts none)")
            : tower && projector ? "trained"
            : tower              ? "the tower trained, the projector frozen"
            : projector          ? "the tower frozen, the projector trained"
                                 : "frozen";
        const bool hooked = cfg.gradCheckpointing && model.vision.tower.checkpointHooked; // Note [Vision step]
        const std::string keeps =
            !cfg.vision.any() ? std::string("; this step feeds no images or video, so the tower does not run")
            : tower || hooked || lora.any()
                ? std::string("; the tower runs in the autograd graph (") +
                      (tower       ? "trained"
                       : projector ? "gradient checkpointing hooks its patch embedding; the projector trained"
                       : hooked    ? "gradient checkpointing hooks its patch embedding"
                                   : "its adapters train") +
                      ") and keeps its activations for backward" + (cfg.gradCheckpointing ? " (each layer's input)" : "")
                : std::string("; the tower's forward runs before the language model's and keeps only the image "
                              "features it scatters into the sequence") +
                      (deepstack ? " and the deepstack features it adds after the first " +
                                       std::to_string(model.vision.tower.deepstack.size()) + " decoder layers"
                                 : std::string());
        notes.push_back(std::string("the weights hold the vision tower and projector, ") + state + ": " + share + keeps);
    }
    if (usesCollectives(cfg))
        notes.push_back("NCCL's communicator takes about 558 MiB of device memory outside PyTorch's allocator "
                        "(measured at one rank); its per-peer buffers on several GPUs come on top");
    std::sort(notes.begin(), notes.end());
    notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
    return notes;
}

} // namespace headroom::est
