#pragma once
// Why a configuration cannot be estimated or measured, as a typed reason: what the advice turns
// into a quick fix, the GUI into a link and the probe into an engine switch. The checks that
// raise them live in one place (headroom/support.h, estimate/support.cpp), except the one a
// configuration fails on its own (TrainingConfig::validate: QLoRA in fp32).

#include "headroom/error.h"

#include <string>

namespace headroom {

enum class Blocker {
    // estimate()
    QloraInFp32,            // QLoRA computes in 16 bits
    PastLearnedPositions,   // a sequence longer than GPT-2's learned positions
    ExpertsLoraAllLinear,   // all-linear on stacked experts was not measured
    ExpertsLoraHalfGateUp,  // gate_proj without up_proj (or the reverse) on one gate_up_proj
    ExpertsLoraDropout,     // PEFT's ParamWrapper raises for lora_dropout > 0
    ExpertsLoraQlora,       // experts' LoRA under QLoRA was not measured
    ExpertsLoraPrecision,   // measured in bf16/fp16 only
    ExpertsLoraSharded,     // measured on one GPU, DDP and ZeRO-1 only
    LedgerSelectiveCheckpointing, // the per-op ledger composes identical layers
    LedgerActivationOffload,      // the per-op ledger has no saved-tensor hooks
    LedgerMla,                    // the per-op ledger has no multi-head latent attention
    LedgerLayerKinds,             // ... nor layers of several kinds (Qwen3.5's DeltaNet, Gemma 4's)
    LoraTargetsNotFound,    // PEFT refuses targets the model does not have
    PreferenceNotModelled,  // DPO is measured (TRL's own step), not yet estimated
    EagerAttentionOnly,     // the model's attention has no SDPA path (GPT-OSS's sinks)
    FlashKernel,            // a flash kernel cannot run it (fp32, heads wider than 256)
    RowVariant,             // a variant of the type its row does not follow (ModelArch::rowGap)
    VisionLanguage,         // a vision-language step is measured, not yet estimated (issue 30)
    // the LibTorch engine (measure with the transformers engine instead)
    EngineModel,
    EngineSlidingWindow,
    EngineGradAccum,
    EngineFusedLossAmp,
    EngineQloraAmp,
    EnginePagedOptimizer,
    EngineActivationOffload,
    EngineSharding,
    EngineMode,             // DPO runs TRL's loss: the transformers engine only
    EngineVision,           // images and video: the transformers engine only
};

struct Refusal
{
    Blocker blocker;
    std::string field;  // the input that decides it ("lora.targets")
    std::string value;  // its value as given
    std::string reason; // one sentence: why, and what to do instead
};

// A refused configuration as estimate() throws it: an InputError (field, value, reason) that also
// says which rule refused it.
class Refused : public InputError
{
public:
    explicit Refused(Refusal r)
        : InputError(r.field, r.value, r.reason)
        , m_refusal(std::move(r))
    {
    }
    const Refusal &refusal() const { return m_refusal; }

private:
    Refusal m_refusal;
};

} // namespace headroom
