// The levers recommend() pulls (levers.h), each one entry: its change on its own and its step in
// the combined plan.

#include "levers.h"

#include <algorithm>
#include <cmath>

namespace headroom::advice {

bool fitsOn(const ModelArch &m, const TrainingConfig &t, const GpuSpec &gpu, double reserve, const EstimatorOptions &opt)
{
    try {
        return judge(m, t, estimate(m, t, opt), gpu, reserve, opt).fit == Fit::Fits;
    } catch (const InputError &) {
        return false;
    }
}

bool LeverContext::fits(const TrainingConfig &t) const
{
    return fitsOn(m, t, gpu, reserve, opt);
}

namespace {

using G = RecommendationGroup;

// An adapter alternative keeps the user's targets where they name this model's Linears, and takes
// all-linear where they do not (GPT-2's are c_attn / c_proj / c_fc, not q_proj...).
TrainingConfig adaptable(const ModelArch &m, TrainingConfig t)
{
    t.lora.targets = loraTargetsFor(m, t.lora.targets);
    // DPO and KTO with adapters: TRL's reference becomes the policy with its adapter disabled, no copy
    if ((t.mode == TrainingMode::DPO || t.mode == TrainingMode::KTO) && t.dpo.reference == Reference::Copy)
        t.dpo.reference = Reference::Adapter;
    return t;
}

template<typename Edit>
TrainingConfig changed(const TrainingConfig &c, Edit edit)
{
    TrainingConfig t = c;
    edit(t);
    return t;
}

// The logits first: with 128k-256k vocabularies they are often the largest single term, and a
// fused loss removes them without changing the math.
const Lever kFusedLoss{
    G::Dynamic,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.loss != Loss::Standard)
            return {};
        return {{"fused-loss", "Fused linear cross-entropy (Liger Kernel, Cut Cross-Entropy)",
                 "none measurable: the logits are made chunk by chunk and never whole; needs liger-kernel "
                 "(Trainer: use_liger_kernel=True; Axolotl: liger_fused_linear_cross_entropy)",
                 changed(x.c, [](TrainingConfig &t) { t.loss = Loss::Fused; })}};
    },
    2, [](const TrainingConfig &c) { return c.loss == Loss::Standard; },
    [](const LeverContext &, TrainingConfig &t) { t.loss = Loss::Fused; },
    [](const TrainingConfig &) { return std::string("fused cross-entropy"); }, "needs liger-kernel"};

const Lever kSdpa{
    G::Dynamic,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.attention != Attention::Eager)
            return {};
        return {{"sdpa", "Use SDPA (flash) attention instead of eager", "none: same math, no s x s matrices kept",
                 changed(x.c, [](TrainingConfig &t) { t.attention = Attention::SDPA; })}};
    },
    1, [](const TrainingConfig &c) { return c.attention == Attention::Eager; },
    [](const LeverContext &, TrainingConfig &t) { t.attention = Attention::SDPA; },
    [](const TrainingConfig &) { return std::string("SDPA attention"); }, "none"};

// A smaller micro-batch that divides the effective batch, so that accumulation keeps it exactly:
// the largest such that fits, else the largest below the current one. The plan goes to 1.
const Lever kMicroBatch{
    G::Dynamic,
    [](const LeverContext &x) -> std::vector<Change> {
        const TrainingConfig &c = x.c;
        if (c.microBatch <= 1)
            return {};
        const int64_t effective = c.microBatch * c.gradAccum;
        const int64_t fits = x.room.microBatch();
        int64_t b = 0;
        for (int64_t d = c.microBatch - 1; d >= 1 && b == 0; --d)
            if (effective % d == 0 && (fits <= 0 || d <= fits))
                b = d;
        if (b == 0)
            b = 1;
        TrainingConfig t = c;
        t.microBatch = b;
        t.gradAccum = effective / b;
        return {{"micro-batch", "Micro-batch " + std::to_string(b) + " x gradient accumulation " + std::to_string(t.gradAccum),
                 "same effective batch (" + std::to_string(effective) + "); more, smaller steps: lower GPU utilisation", t}};
    },
    4, [](const TrainingConfig &c) { return c.microBatch > 1; },
    [](const LeverContext &x, TrainingConfig &t) {
        t.microBatch = 1;
        t.gradAccum = x.c.microBatch * x.c.gradAccum;
    },
    [](const TrainingConfig &c) { return "micro-batch 1 x accumulation " + std::to_string(c.microBatch * c.gradAccum); },
    "lower GPU utilisation"};

// Checkpointing every layer; and, where that is more than the card needs, the fewest layers that
// make it fit (the recomputation, and so the time, in proportion).
const Lever kCheckpointing{
    G::Dynamic,
    [](const LeverContext &x) -> std::vector<Change> {
        const TrainingConfig &c = x.c;
        if (c.gradCheckpointing)
            return {};
        std::vector<Change> out{{"checkpointing", "Turn on gradient checkpointing",
                                 "+20-40% step time: each layer's forward runs again in backward",
                                 changed(c, [](TrainingConfig &t) { t.gradCheckpointing = true; })}};
        const int64_t L = x.m.numLayers;
        auto some = [&](int64_t n) {
            return changed(c, [n](TrainingConfig &t) {
                t.gradCheckpointing = true;
                t.checkpointLayers = n;
            });
        };
        if (isSimulated(c) && L > 2 && judge(x.m, c, x.base, x.gpu, x.reserve, x.opt).fit != Fit::Fits &&
            x.fits(some(L - 1))) {
            int64_t lo = 1, hi = L - 1; // the smallest n in [lo, hi] that fits; hi does
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (x.fits(some(mid)))
                    hi = mid;
                else
                    lo = mid + 1;
            }
            const int pctLo = static_cast<int>(std::lround(20.0 * double(lo) / double(L)));
            const int pctHi = static_cast<int>(std::lround(40.0 * double(lo) / double(L)));
            out.push_back({"checkpoint-some", "Checkpoint the first " + std::to_string(lo) + " of " + std::to_string(L) + " layers",
                           "+" + std::to_string(std::max(1, pctLo)) + "-" + std::to_string(std::max(1, pctHi)) +
                               "% step time: only those layers' forwards run again in backward",
                           some(lo)});
        }
        return out;
    },
    3, [](const TrainingConfig &c) { return !c.gradCheckpointing; },
    [](const LeverContext &, TrainingConfig &t) { t.gradCheckpointing = true; },
    [](const TrainingConfig &) { return std::string("checkpointing"); }, "+20-40% step time"};

// torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward (estimated op by op;
// measured on the H200 within 0.02%).
const Lever kActivationOffload{
    G::Dynamic, [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.activationOffload)
            return {};
        return {{"activation-offload", "Offload saved activations to the CPU (save_on_cpu)",
                 "every saved tensor crosses PCIe twice: a slower step, and pinned host RAM for the activations",
                 changed(x.c, [](TrainingConfig &t) { t.activationOffload = true; })}};
    }};

// Issue 29: DPO's and KTO's reference computed once before training (TRL's
// precompute_ref_log_probs): the step runs no reference forward and keeps no reference logits,
// and a frozen copy is not loaded.
const Lever kPrecomputeReference{
    G::Dynamic, [](const LeverContext &x) -> std::vector<Change> {
        if ((x.c.mode != TrainingMode::DPO && x.c.mode != TrainingMode::KTO) || x.c.dpo.reference == Reference::None)
            return {};
        return {{"precompute-reference", "Precompute the reference's log-probabilities (precompute_ref_log_probs)",
                 "one pass of the reference over the dataset before training; no reference model in the step",
                 changed(x.c, [](TrainingConfig &t) { t.dpo.reference = Reference::None; })}};
    }};

// Issue 29: GRPO without its KL term (beta 0, GRPOConfig's default): no reference pass, and no
// frozen copy to load.
const Lever kGrpoWithoutReference{
    G::Dynamic, [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.mode != TrainingMode::GRPO || x.c.dpo.reference == Reference::None)
            return {};
        return {{"grpo-beta-0", "GRPO with beta = 0 (TRL's default): no reference model",
                 "no KL penalty towards the reference: the policy may drift further from where it started",
                 changed(x.c, [](TrainingConfig &t) {
                     t.dpo.beta = 0.0;
                     t.dpo.reference = Reference::None;
                 })}};
    }};

const Lever kShorterSeq{
    G::Dynamic, [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.mode == TrainingMode::GRPO) { // the prompt stays; the completion halves
            const int64_t prompt = x.c.dpo.prompt(x.c.seqLen), completion = x.c.seqLen - prompt;
            if (completion <= 128)
                return {};
            const TrainingConfig t = changed(x.c, [&](TrainingConfig &n) {
                n.dpo.promptLen = prompt;
                n.seqLen = prompt + completion / 2;
            });
            return {{"shorter-completions", "Shorter completions: max_completion_length " + std::to_string(completion / 2),
                     "completions that reach the limit are cut off; a smaller KV cache and fewer logits", t}};
        }
        if (x.c.seqLen <= 256)
            return {};
        const TrainingConfig t = changed(x.c, [](TrainingConfig &n) { n.seqLen = n.seqLen / 2; });
        return {{"shorter-seq", "Shorter sequences: " + std::to_string(t.seqLen) + " tokens",
                 "longer samples get truncated or split; check your length distribution", t}};
    }};

const Lever kAmpBf16{
    G::Static,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.precision != Precision::FP32)
            return {};
        return {{"amp-bf16", "bf16 mixed precision (autocast) instead of fp32",
                 "needs bf16 (Ampere or newer); fp32 master weights keep the optimizer exact",
                 changed(x.c, [](TrainingConfig &t) { t.precision = Precision::AmpBF16; })}};
    },
    5, [](const TrainingConfig &c) { return c.precision == Precision::FP32; },
    [](const LeverContext &, TrainingConfig &t) { t.precision = Precision::AmpBF16; },
    [](const TrainingConfig &) { return std::string("bf16 autocast"); }, "needs bf16"};

const Lever kLora{
    G::Static,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.finetune != FineTune::Full)
            return {};
        TrainingConfig t = adaptable(x.m, x.c);
        t.finetune = FineTune::LoRA;
        return {{"lora", "LoRA (rank " + std::to_string(x.c.lora.rank) + ") instead of full fine-tuning",
                 "trains adapters only; quality can trail full fine-tuning on hard tasks", t}};
    },
    7, [](const TrainingConfig &c) { return c.finetune == FineTune::Full; },
    [](const LeverContext &x, TrainingConfig &t) {
        t = adaptable(x.m, t);
        t.finetune = FineTune::LoRA;
    },
    [](const TrainingConfig &c) { return "LoRA r" + std::to_string(c.lora.rank); }, "adapters only"};

const Lever kQlora{
    G::Static,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.finetune == FineTune::QLoRA || x.c.precision == Precision::FP32)
            return {};
        TrainingConfig t = adaptable(x.m, x.c);
        t.finetune = FineTune::QLoRA;
        return {{"qlora", "QLoRA: 4-bit NF4 base with LoRA adapters",
                 "about +30% step time for dequantization; small quality cost", t}};
    },
    8, [](const TrainingConfig &c) { return c.finetune != FineTune::QLoRA; },
    [](const LeverContext &x, TrainingConfig &t) {
        t = adaptable(x.m, t);
        t.finetune = FineTune::QLoRA;
        if (t.precision == Precision::FP32) // QLoRA computes in 16 bits
            t.precision = Precision::AmpBF16;
    },
    [](const TrainingConfig &) { return std::string("QLoRA (4-bit base)"); }, "+30% step time"};

const Lever kAdamW8bit{
    G::Static,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.optimizer != Optimizer::AdamW)
            return {};
        return {{"adamw-8bit", "8-bit AdamW (bitsandbytes)",
                 "blockwise-quantized state; needs bitsandbytes; usually matches AdamW",
                 changed(x.c, [](TrainingConfig &t) { t.optimizer = Optimizer::AdamW8bit; })}};
    },
    6, [](const TrainingConfig &c) { return c.optimizer == Optimizer::AdamW; },
    [](const LeverContext &, TrainingConfig &t) { t.optimizer = Optimizer::AdamW8bit; },
    [](const TrainingConfig &) { return std::string("8-bit AdamW"); }, "needs bitsandbytes"};

// The moments of large tensors move to CUDA managed memory: out of the allocator's totals, and
// paged to host RAM by the driver when the card runs short.
const Lever kPagedAdamW8bit{
    G::Static, [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.optimizer != Optimizer::AdamW && x.c.optimizer != Optimizer::AdamW8bit)
            return {};
        return {{"paged-adamw-8bit", "Paged 8-bit AdamW (bitsandbytes)",
                 "moments in managed memory: nvidia-smi still counts them while they fit, and steps slow down when "
                 "the driver pages them to host RAM; needs bitsandbytes",
                 changed(x.c, [](TrainingConfig &t) { t.optimizer = Optimizer::PagedAdamW8bit; })}};
    }};

const Lever kOffloadOptimizer{
    G::Static,
    [](const LeverContext &x) -> std::vector<Change> {
        if (x.c.optimizer == Optimizer::SGD || x.c.offloadOptimizer)
            return {};
        return {{"offload-optimizer", "Offload the optimizer state to the CPU (ZeRO-Offload)",
                 "the optimizer step runs on the CPU: slower steps, PCIe traffic, and host RAM for the state",
                 changed(x.c, [](TrainingConfig &t) { t.offloadOptimizer = true; })}};
    },
    9, [](const TrainingConfig &c) { return c.optimizer != Optimizer::SGD && !c.offloadOptimizer; },
    [](const LeverContext &, TrainingConfig &t) { t.offloadOptimizer = true; },
    [](const TrainingConfig &) { return std::string("optimizer state on the CPU"); }, "slower steps"};

// The fewest GPUs (up to 64) on which a full shard fits; none if even 64 do not.
const Lever kZero{
    G::Sharding, [](const LeverContext &x) -> std::vector<Change> {
        const TrainingConfig &c = x.c;
        if (c.zeroStage >= 3 && c.worldSize >= 64)
            return {};
        TrainingConfig t = c;
        t.zeroStage = 3;
        int found = 0;
        for (int n : {2, 4, 8, 16, 32, 64}) {
            if (n <= c.worldSize)
                continue;
            t.worldSize = n;
            try {
                if (judge(x.m, t, estimate(x.m, t, x.opt), x.gpu, x.reserve, x.opt).fit == Fit::Fits) {
                    found = n;
                    break;
                }
            } catch (const InputError &) {
                break;
            }
        }
        if (found == 0)
            return {};
        t.worldSize = found;
        return {{"zero", "ZeRO-3 / FSDP full shard: needs " + std::to_string(found) + " GPUs",
                 "all-gathers every layer each step: needs fast interconnect between the " + std::to_string(found) + " GPUs",
                 t}};
    }};

} // namespace

const std::vector<Lever> &levers()
{
    static const std::vector<Lever> all = {kFusedLoss,  kSdpa,    kMicroBatch, kCheckpointing, kActivationOffload,
                                           kPrecomputeReference, kGrpoWithoutReference, kShorterSeq, kAmpBf16, kLora, kQlora, kAdamW8bit,
                                           kPagedAdamW8bit, kOffloadOptimizer, kZero};
    return all;
}

} // namespace headroom::advice
