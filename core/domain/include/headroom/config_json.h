#pragma once

#include "headroom/types.h"

#include <nlohmann/json.hpp>

namespace headroom {

// Strict readers: unknown enum values and wrong types throw InputError naming the field.
nlohmann::json toJson(const TrainingConfig &c);
TrainingConfig trainingConfigFromJson(const nlohmann::json &j);

} // namespace headroom
