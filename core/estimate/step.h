#pragma once
// What estimate() and the per-op ledger share: the step's shapes and dtypes (Ctx), the parameter
// counts from the model's inventory (params.cpp), the notes on the mechanisms in play (notes.cpp)
// and the totals outside the allocator. Internal to the estimate layer.

#include "headroom/error.h"
#include "headroom/estimator.h"

#include <array>
#include <string>
#include <vector>

namespace headroom::est {

using C = Category;

// Array indices for the linear modules, in LinearModule's order (loraTargetMask's mask).
enum Module {
    ModQ = int(LinearModule::Q),
    ModK = int(LinearModule::K),
    ModV = int(LinearModule::V),
    ModO = int(LinearModule::O),
    ModGate = int(LinearModule::Gate),
    ModUp = int(LinearModule::Up),
    ModDown = int(LinearModule::Down),
    ModuleCount = kLinearModuleCount
};

struct Ctx
{
    const ModelArch &m;
    const TrainingConfig &cfg;
    int64_t T = 0, b = 0, s = 0, h = 0, qOut = 0, kvOut = 0, nh = 0, V = 0;
    int c = 2;  // activation bytes
    int r = 2;  // residual-stream bytes (fp32 under autocast: the embedding is not autocast)
    int p = 2;  // parameter / gradient / optimizer-state bytes
    bool amp = false;
    bool full = true;
    bool qlora = false;
    std::array<bool, ModuleCount> lora{};
    ExpertsLora experts; // PEFT's ParamWrappers on the stacked experts
    int loraBytes = 4; // PEFT's autocast_adapter_dtype=True keeps adapters in fp32
    int64_t weightCopies = 1; // experts share one simulated MLP: E weight copies under autocast
    bool mixedPrecisionPolicy = false; // FSDP2's: bf16 compute over fp32 shards

    Ctx(const ModelArch &model, const TrainingConfig &config)
        : m(model)
        , cfg(config)
    {
        T = checkedMul(config.microBatch, config.seqLen);
        b = config.microBatch;
        s = config.seqLen;
        h = model.hiddenSize;
        nh = model.numHeads;
        qOut = model.numHeads * model.headDim;
        kvOut = model.numKvHeads * model.headDim;
        V = model.vocabSize;
        c = computeBytes(config.precision);
        amp = isAmp(config.precision);
        p = parameterBytes(config.precision);
        if (amp && config.zeroStage >= 2) {
            // FSDP2 with MixedPrecisionPolicy(param_dtype=bf16): each unit's parameters are
            // all-gathered in bf16 and its inputs cast to bf16 (cast_forward_inputs), so the
            // step runs as pure bf16 (autocast finds nothing to cast); the sharded fp32 parameters,
            // their fp32 gradients (reduce_dtype) and the optimizer state stay fp32.
            amp = false;
            mixedPrecisionPolicy = true;
        }
        r = amp ? 4 : c;
        full = config.finetune == FineTune::Full;
        qlora = config.finetune == FineTune::QLoRA;
        if (qlora && config.zeroStage < 2) {
            // peft.prepare_model_for_kbit_training makes every parameter that is not 4-bit fp32,
            // and with fp32 embeddings and norms every activation is fp32 (as the simulator,
            // program.cpp Run). FSDP-QLoRA recipes skip it (TRL's sharded QLoRA) and stay in bf16.
            p = 4;
            if (!amp)
                c = r = 4;
        }
        if (!full) {
            lora = loraAdaptedModules(model, config.lora.targets); // indexed like Module
            experts = expertsLora(model, config.lora.targets);
        }
    }
    int64_t tok(int64_t bytesPerToken) const { return checkedMul(T, bytesPerToken); }
    int64_t inFeatures(Module mod) const { return linearInFeatures(m, LinearModule(mod)); }
    int64_t outFeatures(Module mod) const { return linearOutFeatures(m, LinearModule(mod)); }
};

struct Params
{
    ParamSummary summary;
    int64_t layerGradBytes = 0;   // gradients one decoder layer produces
    int64_t embedGradBytes = 0;     // token embedding (the lm_head's too when tied)
    int64_t positionGradBytes = 0;  // learned positions (GPT-2)
    int64_t lmHeadGradBytes = 0;    // untied lm_head
    int64_t finalNormGradBytes = 0;
    int64_t stepTemporaryBytes = 0;
    int64_t largestLayerParamBytes = 0; // for ZeRO-3 gathers
    int64_t largestLayerGradTensorBytes = 0; // ZeRO-2: the largest gradient a layer produces whole
    int64_t rootParamBytes = 0;              // ZeRO-3: embedding, positions, final norm, lm_head
};

// Parameter, gradient and optimizer-state counts from the model's parameter inventory
// (model.h parameterInventory), the adapters PEFT adds, and the optimizer's state layout
// (optimizerStateBytes, its file in core/sim/optim/).
Params countParams(const Ctx &x);
// The counts one rank holds of what the estimate reports (ZeRO shards the paged state too).
ParamSummary paramsPerRank(const Params &P, const TrainingConfig &cfg);

// Notes on mechanisms in play that the user may not expect, sorted, each once.
std::vector<std::string> stepNotes(const Ctx &x, const Estimate &est);

double defaultSlackFraction();
void takePeakPhase(Estimate &est);
// est.run replayed into the phases, the peak and the device total (estimator.cpp).
void budgetFromRun(Estimate &est, const TrainingConfig &cfg, const EstimatorOptions &opt);
bool usesCollectives(const TrainingConfig &cfg);
void addOutsideAllocator(Estimate &est, const TrainingConfig &cfg, const EstimatorOptions &opt);

// The per-op ledger (ledger_step.cpp): what the simulation does not run yet.
Estimate estimateLedger(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt);

} // namespace headroom::est
