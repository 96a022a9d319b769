#pragma once

#include "headroom/budget.h"
#include "headroom/estimator.h"

#include <nlohmann/json.hpp>

namespace headroom {

// Strict readers: unknown enum values and wrong types throw InputError naming the field.
nlohmann::json toJson(const TrainingConfig &c);
TrainingConfig trainingConfigFromJson(const nlohmann::json &j);

nlohmann::json toJson(const Breakdown &b);
Breakdown breakdownFromJson(const nlohmann::json &j, const std::string &field = "breakdown");

nlohmann::json toJson(const Estimate &e);
nlohmann::json toJson(const Verdict &v, const GpuSpec &gpu);
nlohmann::json toJson(const Recommendation &r);

// The CLI's `estimate --json` document (schema_version 1).
nlohmann::json estimateDocument(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                                double reserve, const std::vector<Recommendation> &recs,
                                const EstimatorOptions &opt = {});

// Helpers for readers of untrusted JSON.
const nlohmann::json &requireField(const nlohmann::json &obj, const std::string &key, const std::string &ctx);
void requireSchema(const nlohmann::json &obj, const std::string &ctx); // schema_version == kSchemaVersion
// A value from outside, for a message: strings as they are, anything else as compact JSON, with
// invalid UTF-8 replaced (dump() would throw on it) and at most `limit` characters.
std::string showJson(const nlohmann::json &v, size_t limit = 200);
// Parses text from outside (a sheet, a probe's output) with a size and nesting limit.
nlohmann::json parseUntrusted(const std::string &text, const std::string &ctx, size_t maxBytes = 64u << 20,
                              int maxDepth = 64);
// Reads a JSON file from outside: at most maxBytes are read (a FIFO or /dev/zero cannot make it
// read forever), then parseUntrusted's size and depth limits. `field` names it in errors.
nlohmann::json readJsonFile(const std::string &path, const std::string &field, size_t maxBytes = 64u << 20);
int64_t requireInt64(const nlohmann::json &obj, const std::string &key, const std::string &ctx, int64_t lo, int64_t hi);

} // namespace headroom
