#pragma once

#include "headroom/budget.h"
#include "headroom/config_json.h"
#include "headroom/estimator.h"
#include "headroom/json_input.h"

#include <nlohmann/json.hpp>

namespace headroom {

nlohmann::json toJson(const Breakdown &b);
Breakdown breakdownFromJson(const nlohmann::json &j, const std::string &field = "breakdown");

nlohmann::json toJson(const Estimate &e);
nlohmann::json toJson(const Verdict &v, const GpuSpec &gpu);
nlohmann::json toJson(const Recommendation &r);

// The CLI's `estimate --json` document (schema_version 1).
nlohmann::json estimateDocument(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                                double reserve, const std::vector<Recommendation> &recs,
                                const EstimatorOptions &opt = {}, const Room *room = nullptr);

} // namespace headroom
