#pragma once
// Reading JSON from outside (a config.json, a sheet, a probe's output): bounded, and every problem
// an InputError that names the field.

#include "headroom/files.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace headroom {

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

// obj[key] when obj is an object and the value a string, else `fallback`. For keys that only steer
// (an event's name, a note): nlohmann's value() throws type_error when the key holds another type.
std::string stringOr(const nlohmann::json &obj, const std::string &key, const std::string &fallback = {});

int64_t requireInt64(const nlohmann::json &obj, const std::string &key, const std::string &ctx, int64_t lo, int64_t hi);

} // namespace headroom
