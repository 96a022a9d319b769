#pragma once
// What Headroom can estimate and measure, decided in one place (estimate/support.cpp), each "no"
// a typed Refusal (headroom/refusal.h): estimate() throws it, the probe and the GUI switch the
// LibTorch engine's refusals to the transformers engine, and quickFix turns a refusal into the
// nearest configuration that can be estimated.

#include "headroom/model.h"
#include "headroom/refusal.h"
#include "headroom/simulation.h"
#include "headroom/types.h"

#include <optional>
#include <string>

namespace headroom {

// Whether estimate() simulates this configuration op by op (one GPU, DDP, ZeRO-1, FSDP2), or
// uses the per-op ledger (optimizer offload, QLoRA under FSDP).
bool isSimulated(const TrainingConfig &config);

// Why estimate() cannot answer for a valid model and configuration; nullopt when it can.
std::optional<Refusal> estimateRefusal(const ModelArch &model, const TrainingConfig &config);

// Whether the traced estimate (the user's own stack on fake tensors, headroom-probe --trace)
// answers what this refusal leaves open: a configuration the rows do not model but the real stack
// runs (all-linear on stacked experts, their LoRA in another precision). A refusal of what the
// real stack itself fails on (QLoRA in fp32, past learned positions, targets PEFT cannot find)
// stays a refusal.
bool traceAnswers(Blocker blocker);

// Why the LibTorch engine cannot measure this configuration the way the real stack runs it;
// nullopt when it can. The LibTorch engine re-implements Llama-style modeling; checked against the
// transformers engine on the H200 (tests/data/h200/final-2026-12-01): within 0.012% on Llama,
// Mistral, Qwen2 and Qwen3 steps (full, LoRA, amp, checkpointing, AdamW, SGD, Adafactor), 10.5%
// under with gradient accumulation, 1.1% under on Gemma. Everything it refuses is measured with
// the transformers engine.
std::optional<Refusal> libtorchRefusal(const ModelArch &model, const TrainingConfig &config);

// When a configuration is refused, the nearest one that can be estimated, with one line that
// says what changes: LoRA on the attention only where PEFT would wrap stacked MoE experts (or
// finds none of the targets), bf16 compute for QLoRA asked in fp32, the longest sequence learned
// positions allow, LoRA instead of QLoRA with MLA. nullopt when there is no such fix, or when the
// fix alone does not make it estimable.
struct QuickFix
{
    std::string title;     // "LoRA on the attention only (q_proj, o_proj)"
    TrainingConfig config; // the fixed configuration, checked to estimate
};
std::optional<QuickFix> quickFix(const ModelArch &m, const TrainingConfig &c, const Refusal &why,
                                 const EstimatorOptions &opt = {});
// The same for an error estimate() threw: a Refused carries its refusal; any other has no fix.
std::optional<QuickFix> quickFix(const ModelArch &m, const TrainingConfig &c, const InputError &error,
                                 const EstimatorOptions &opt = {});

} // namespace headroom
