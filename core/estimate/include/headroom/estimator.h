#pragma once

#include "headroom/allocator.h"
#include "headroom/model.h"
#include "headroom/simulation.h"
#include "headroom/support.h"
#include "headroom/timeline.h"
#include "headroom/types.h"

#include <memory>

namespace headroom {

struct Breakdown
{
    std::array<int64_t, kCategoryCount> bytes{};

    int64_t &operator[](Category c) { return bytes[static_cast<size_t>(c)]; }
    int64_t operator[](Category c) const { return bytes[static_cast<size_t>(c)]; }
    int64_t total() const;
    // What PyTorch's caching allocator hands out: all but slack and the CUDA context.
    int64_t allocated() const;
};

struct PhaseEstimate
{
    Phase phase = Phase::AfterLoad;
    int64_t peakAllocatedBytes = 0;
    // What the caching allocator holds at most during the phase (its peak since the phase began,
    // as torch.cuda.max_memory_reserved after reset_peak_memory_stats); 0 from the ledger path.
    int64_t peakReservedBytes = 0;
    Breakdown atPeak; // allocated categories at this phase's peak
    // Of atPeak, what the vision tower and its projector hold (Note [Vision share]); zero for a
    // text model and for a step estimated without its tower.
    Breakdown vision;
};

struct ParamSummary
{
    int64_t total = 0;
    int64_t trainable = 0;
    int64_t weightBytes = 0;
    int64_t gradientBytes = 0;
    int64_t optimizerStateBytes = 0;
    int64_t largestTrainableBytes = 0;
    int64_t hostOptimizerStateBytes = 0; // offloaded to the CPU (per rank), not on the GPU
    // bitsandbytes paged optimizers: state in CUDA managed memory (cudaMallocManaged), outside
    // PyTorch's allocator; resident on the GPU while there is room, paged to host RAM under
    // pressure. Not in optimizerStateBytes, allocated or reserved.
    int64_t pagedOptimizerStateBytes = 0;
};

struct Estimate
{
    ParamSummary params;
    std::array<PhaseEstimate, 4> phases; // after load, forward, backward, optimizer (kAllPhases)
    // Issue 29: GRPO's generation and (beta > 0) reference phases, in step order; empty otherwise.
    std::vector<PhaseEstimate> rollout;
    Phase peakPhase = Phase::Forward;
    Breakdown peak;                 // at the overall peak, slack and context included
    Breakdown peakVision;           // of it, the vision tower's and projector's (Note [Vision share])
    int64_t peakAllocatedBytes = 0; // torch.cuda.max_memory_allocated
    int64_t peakReservedBytes = 0;  // torch.cuda.max_memory_reserved
    // What nvidia-smi shows as Used: peak reserved + the CUDA context (+ NCCL's communicator).
    int64_t deviceTotalBytes = 0;
    // What the driver keeps of the card (nvidia-smi's Reserved): the verdict's capacity is the
    // card's total less this, PyTorch's "total capacity" in its OOM message.
    int64_t driverReservedBytes = 0;
    // Issue 29: GRPO with vLLM colocated: the fraction of the card vLLM holds beside the step
    // (gpu_memory_utilization, modelled as vLLM documents it: its weights, activations and KV
    // cache within it); the verdict gives the step the rest. 0 otherwise.
    double colocatedShare = 0.0;
    int64_t tokens = 0;
    std::vector<std::string> notes; // mechanisms in play worth telling the user
    // The simulated run this estimate replayed (null from the per-op ledger): the verdict replays
    // it again at the card's limit instead of simulating the step a second time.
    std::shared_ptr<const Timeline> run;

    // A phase the step has (one of kAllPhases, or a rollout phase it ran; else an empty one).
    const PhaseEstimate &phase(Phase p) const;
    // Every phase the step has, in step order (after load, generation, reference, forward, ...).
    std::vector<const PhaseEstimate *> stepPhases() const;
};

// Per-GPU estimate of one steady-state training step (after the first optimizer step).
// Throws InputError for an invalid model or configuration.
Estimate estimate(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options = {});

// An estimate from a traced run: the transformers engine's --trace (the user's own Transformers,
// PEFT and optimizer stepped on fake tensors, docs/estimator.md Note [Traced step]) replayed
// through the same allocator model as a simulated run, phase by phase. `params` and `notes` come
// with the trace (readTracedRun in serialize.h). Throws InputError for a timeline with no steady step.
Estimate estimateFromTrace(Timeline traced, const TrainingConfig &config, const EstimatorOptions &options,
                           const ParamSummary &params, std::vector<std::string> notes = {});

// The run the estimate is made from: every allocation and free of loading the model, the warm-up
// step and `steadySteps` steady steps (1..8), in order (for the Timeline view and the allocator
// replay; the estimate replays a second steady step as repeatLastStep copies it).
Timeline estimateTimeline(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options = {},
                          int steadySteps = 1);

} // namespace headroom
