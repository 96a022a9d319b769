#pragma once
// An optimizer in the simulator: what one optimizer.step() allocates, its state at each
// parameter's first step and its temporaries at every step, in the order the real step makes and
// frees them, and the state layout that step makes, which the parameter counts read too
// (optimizerStateBytes in headroom/simulation.h). One file per optimizer in sim/optim/ (CMake
// lists the folder); its facts (name, labels, Hugging Face names) are its row of the optimizer
// table (domain/types.cpp), which the explorer and the formats read.

#include "autograd.h"

#include "headroom/error.h"
#include "headroom/types.h"

#include <array>
#include <vector>

namespace headroom::sim {

struct OptimizerStep
{
    Sim &S;
    const std::vector<T *> &params; // what this rank's optimizer steps (all, or its ZeRO share)
    const TrainingConfig &config;
    bool first;              // the first step: the state is made
    std::vector<int> &state; // the state's storages, alive for the rest of the run
};

// A parameter tensor as an optimizer's state sees it: [rows, cols] (cols 1 for a vector), numel
// values of elem bytes.
// See Note [Optimizer state layout] (docs/estimator.md).
struct ParamShape
{
    int64_t rows = 0, cols = 1, numel = 0;
    int elem = 2;
};

// The state tensors the optimizer's init makes for one parameter, in the order it makes them, and
// what it puts in CUDA managed memory instead (outside the allocator).
struct StateLayout
{
    std::array<int64_t, 4> bytes{};
    int count = 0;
    int64_t pagedBytes = 0;
    void add(int64_t b) { bytes[static_cast<size_t>(count++)] = b; }
};

struct SimOptimizer
{
    std::vector<Optimizer> ids; // the table's optimizers this step serves
    void (*step)(OptimizerStep &);
    StateLayout (*state)(const ParamShape &, const TrainingConfig &);
    // The step's largest temporaries over the trainable tensors (the per-op ledger's term).
    int64_t (*stepTemporaries)(const TrainingConfig &, int64_t largestTrainableBytes, int64_t trainableBytes);
};

// A parameter's shape as its simulated tensor knows it.
inline ParamShape shapeOf(const T &p)
{
    return {p.rows > 0 ? p.rows : p.numel(), p.cols > 0 ? p.cols : 1, p.numel(), p.elem};
}

// Allocates `layout`'s tensors as optimizer state, kept for the run.
// What a step allocates for a parameter belongs to the parameter's part of the model (Note
// [Vision share]): a scope for each parameter's allocations.
inline PartScope paramPart(Sim &S, const T &p)
{
    return PartScope(S, p.valid() ? S.partOf(p.sto) : S.part());
}

inline void allocateState(OptimizerStep &o, const StateLayout &layout)
{
    for (int i = 0; i < layout.count; ++i)
        o.state.push_back(o.S.allocate(layout.bytes[static_cast<size_t>(i)], Category::OptimizerState));
}

inline int64_t noStepTemporaries(const TrainingConfig &, int64_t, int64_t) { return 0; }

// The per-op ledger's term for a step over parameter-sized temporaries (AdamW; Adafactor measured
// the same): foreach's one state-sized list, the for-loop's two copies of the largest tensor,
// nothing fused.
inline int64_t parameterSizedStepTemporaries(const TrainingConfig &c, int64_t largest, int64_t trainable)
{
    if (c.optimizerImpl == OptimizerImpl::Fused)
        return 0;
    return c.optimizerImpl == OptimizerImpl::ForLoop ? checkedMul(2, largest) : trainable;
}

// One function per file in sim/optim/, named optimizer_<file> (the list is generated).
#define HEADROOM_OPTIMIZER(name) const SimOptimizer &optimizer_##name();
#include "optimizers.inc"
#undef HEADROOM_OPTIMIZER

// The simulated step of `o`; throws InputError for an optimizer no file serves.
const SimOptimizer &simOptimizer(Optimizer o);

} // namespace headroom::sim
