#pragma once
// An optimizer in the simulator: what one optimizer.step() allocates, its state at each
// parameter's first step and its temporaries at every step, in the order the real step makes and
// frees them. One file per optimizer in sim/optim/ (CMake lists the folder); its facts (name,
// labels, Hugging Face names, parameter-shaped state tensors) are its row of the optimizer table
// (domain/types.cpp), which the parameter counts and the formats read.

#include "autograd.h"

#include "headroom/types.h"

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

struct SimOptimizer
{
    std::vector<Optimizer> ids; // the table's optimizers this step serves
    void (*step)(OptimizerStep &);
};

// One function per file in sim/optim/, named optimizer_<file> (the list is generated).
#define HEADROOM_OPTIMIZER(name) const SimOptimizer &optimizer_##name();
#include "optimizers.inc"
#undef HEADROOM_OPTIMIZER

// The simulated step of `o`; throws InputError for an optimizer no file serves.
const SimOptimizer &simOptimizer(Optimizer o);

} // namespace headroom::sim
