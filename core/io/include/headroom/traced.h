#pragma once
// A traced run: the transformers engine's --trace output (kind probe_timeline, engine "trace"),
// the user's own Transformers, PEFT and optimizer stepped on fake tensors, and the estimate
// replayed from it (estimateFromTrace). See docs/estimator.md, Note [Traced step].

#include "headroom/estimator.h"
#include "headroom/measurement.h"
#include "headroom/types.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace headroom {

struct TracedRun
{
    Timeline timeline;
    TrainingConfig config;     // the configuration that was traced
    std::string modelType;     // the traced model's model_type (an early trace: its class name)
    std::string device;        // "cuda" (a CUDA step, its kernels' rules applied) or "cpu"
    std::string torchVersion, transformersVersion, peftVersion;
    int64_t totalParams = 0, trainableParams = 0;
    double traceSeconds = 0.0;
};

// The request a trace of `m` under `c` is made from (the transformers engine, one steady step, a
// CUDA step): the CLI and the explorer start the probe with it and key their caches by it.
ProbeRequest traceRequest(const ModelArch &m, const TrainingConfig &c);

// Reads and checks a trace file; throws InputError naming the field.
TracedRun tracedRunFromJson(const nlohmann::json &j);
TracedRun readTracedRun(const std::string &path);

// The estimate of the traced configuration: the timeline replayed through the allocator model,
// with a note naming the stack that was traced ("traced with your transformers 5.17.0, ...").
Estimate estimateTraced(const TracedRun &run, const EstimatorOptions &options = {});

} // namespace headroom
