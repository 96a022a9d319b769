#pragma once

#include "headroom/types.h"

#include <nlohmann/json.hpp>

namespace headroom {

// Strict readers: unknown enum values and wrong types throw InputError naming the field.
// `everyField`: also the settings written only when set (the loss, selective checkpointing,
// activation offload) at their defaults, for comparing two configurations key by key.
nlohmann::json toJson(const TrainingConfig &c, bool everyField = false);
TrainingConfig trainingConfigFromJson(const nlohmann::json &j);
// Issue 30: the vision block, written wherever it differs from the default (a text step has none).
nlohmann::json visionJson(const TrainingConfig::Vision &v);

} // namespace headroom
