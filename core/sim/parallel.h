#pragma once
// A parallel strategy in the simulator: how a run over several ranks wraps the model and what it
// allocates at each point of the step, from one rank's view. One file per strategy in
// sim/parallel/ (CMake lists the folder): single GPU, DDP, ZeRO-1 (DDP with
// ZeroRedundancyOptimizer) and FSDP2. The run loop calls the hooks below and knows no strategy.

#include "autograd.h"

#include "headroom/simulation.h"
#include "headroom/types.h"

#include <functional>
#include <memory>
#include <vector>

namespace headroom::sim {

// The model as a strategy sees it, once built (and quantized, and adapted).
struct ParallelModel
{
    // FSDP2's units in model.parameters() order: [0] the root (embeddings, final norm, lm_head),
    // then each decoder layer with its adapters after the Linear they wrap.
    std::vector<std::vector<T *>> units;
    std::vector<T> *buffers = nullptr; // the model's buffers (rotary inv_freq, router biases)
    std::vector<T *> trainable;        // model.parameters() that require grad, in order
};

class ParallelStrategy
{
public:
    virtual ~ParallelStrategy() = default;

    // The model is built on the CPU and wrap() moves it (Trainer leaves an FSDP model where it is).
    virtual bool buildsOnHost() const { return false; }
    // FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) replaces autocast: the step
    // runs as pure bf16 on an fp32 model.
    virtual bool replacesAutocast(bool /*amp*/) const { return false; }

    // After the model is built: wraps it and returns what this rank's optimizer steps.
    virtual std::vector<T *> wrap(ParallelModel &model) = 0;
    // Whether a stepped parameter's gradient is its own tensor (.grad None where backward gave it
    // none, and the optimizer skips it); wrappers keep gradients in their own buffers.
    virtual bool ownGradients() const { return false; }

    // The forward: the root before the embedding, each decoder layer around its body (its input
    // and output may become hook nodes), the root again after the loss.
    virtual void rootForward() {}
    virtual void layerInput(size_t /*unit*/, T & /*x*/) {}
    virtual void layerOutput(size_t /*unit*/, T & /*y*/) {}
    virtual void forwardDone() {}

    // Around loss.backward(); `sync`: the micro-batch whose gradients are reduced (no_sync before).
    virtual void beforeBackward(bool /*sync*/) {}
    virtual void afterBackward() {}

    // After optimizer.zero_grad() of step `step`.
    virtual void afterZeroGrad(int /*step*/) {}
};

struct ParallelContext
{
    Sim &S;
    const TrainingConfig &config;
    const EstimatorOptions &options;
};

struct ParallelKind
{
    const char *name;
    bool (*serves)(const TrainingConfig &); // exactly one kind serves each configuration
    std::unique_ptr<ParallelStrategy> (*make)(const ParallelContext &);
};

// One function per file in sim/parallel/, named parallel_<file> (the list is generated).
#define HEADROOM_PARALLEL(name) const ParallelKind &parallel_##name();
#include "parallels.inc"
#undef HEADROOM_PARALLEL

// The strategy that runs `c`.
std::unique_ptr<ParallelStrategy> makeParallelStrategy(const ParallelContext &ctx);

} // namespace headroom::sim
