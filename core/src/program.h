#pragma once
// A training run as Hugging Face Trainer runs it, written against the autograd simulator: the
// model built on the GPU, then for each step every micro-batch's forward and backward, the
// optimizer step and zero_grad. The result is the run's allocation timeline. Internal to core.

#include "headroom/estimator.h"
#include "headroom/timeline.h"

namespace headroom {

// Simulates warm-up step 0 and `measuredSteps` steps after it (the probe's default is 2).
Timeline simulateRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options,
                     int measuredSteps = 2);

// The run as the engine measures it (a warm-up and two steady steps) for the allocator replay:
// one simulated steady step and a copy of it (repeatLastStep) when it is closed; otherwise both
// steps simulated.
Timeline simulateMeasuredRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options);

} // namespace headroom
