#pragma once
// headroom-cli's traced path: a model type with no modelled row is estimated from a trace of the
// user's own stack (headroom-probe --engine transformers --trace, docs/estimator.md Note [Traced
// step]), cached by the request, the interpreter and its torch, transformers and peft versions.

#include "headroom/model.h"
#include "headroom/budget.h"
#include "headroom/traced.h"

#include <nlohmann/json.hpp>

#include <string>

namespace headroom::cli {

// The trace of `m` under `c`, from the cache or made now (progress on stderr). Throws InputError
// with one line naming what is missing (no interpreter, no torch or transformers, the engine's
// own refusal) and never falls back to a guess.
TracedRun traceForEstimate(const ModelArch &m, const TrainingConfig &c, bool *cached = nullptr);

// `estimate --json` of a traced estimate: where it came from, the phases, the peak, the verdict.
nlohmann::json tracedDocument(const TracedRun &run, const std::string &source, const Estimate &e, const Verdict &v,
                              const GpuSpec &gpu);

} // namespace headroom::cli
