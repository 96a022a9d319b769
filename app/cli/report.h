#pragma once
// What headroom-cli prints about a configuration: the estimate's table (categories at the peak,
// phase peaks, verdict, recommendations) and the comparison of an estimate with a measured run.

#include "headroom/budget.h"
#include "headroom/estimator.h"

#include <string>
#include <vector>

namespace headroom::cli {

std::string human(int64_t bytes); // GiB, two decimals
// "Qwen2.5 0.5B | lora r16 | bf16 | adamw (foreach) | batch 2 x seq 2048 | sdpa | checkpointing"
std::string describeConfig(const ModelArch &m, const TrainingConfig &c);
// The `models` table's id column: the longest preset id.
int presetIdWidth();
void printTable(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu, double reserve,
                const std::vector<Recommendation> &recs, const EstimatorOptions &opt, const Room *room = nullptr);
// `headroom-cli compare RESULT`: the estimate of a probe result's configuration against what it
// measured, phase by phase; exit 1 outside the tolerance.
int compare(const std::string &path, double tolerance, bool asJson);

} // namespace headroom::cli
