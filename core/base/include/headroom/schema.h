#pragma once

namespace headroom {

// The version every document Headroom writes and reads carries: requests, results, sheets.
constexpr int kSchemaVersion = 1;

} // namespace headroom
