#include "headroom/json_input.h"

#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/schema.h"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

namespace headroom {

using nlohmann::json;

namespace {
std::string show(const json &v)
{
    return showJson(v);
}
} // namespace

const json &requireField(const json &obj, const std::string &key, const std::string &ctx)
{
    if (!obj.is_object())
        throw InputError(ctx, show(obj).substr(0, 40), "must be a JSON object");
    auto it = obj.find(key);
    if (it == obj.end())
        throw InputError(ctx + "." + key, "(missing)", "required field is missing");
    return *it;
}

int64_t requireInt64(const json &obj, const std::string &key, const std::string &ctx, int64_t lo, int64_t hi)
{
    const json &v = requireField(obj, key, ctx);
    if (!v.is_number_integer())
        throw InputError(ctx + "." + key, show(v), "must be a whole number");
    // Past int64 (an unsigned 2^64 - 1) is out of the range, never wrapped to a negative number.
    const int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
    if (n < lo || n > hi)
        throw InputError(ctx + "." + key, show(v),
                         "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return n;
}

void requireSchema(const json &j, const std::string &ctx)
{
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    const int64_t v = requireInt64(j, "schema_version", ctx, 1, 1000);
    if (v != kSchemaVersion)
        throw InputError(ctx + ".schema_version", std::to_string(v),
                         "unsupported (this build reads " + std::to_string(kSchemaVersion) + ")");
}

std::string showJson(const json &v, size_t limit)
{
    std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > limit)
        s = s.substr(0, limit) + "...";
    return s;
}

json parseUntrusted(const std::string &text, const std::string &ctx, size_t maxBytes, int maxDepth)
{
    if (text.size() > maxBytes)
        throw InputError(ctx, std::to_string(text.size()) + " bytes",
                         "too large (the limit is " + std::to_string(maxBytes) + " bytes)");
    // A NUL byte is refused, never a place where reading stops (issue 32, row 16).
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
        throw InputError(ctx, "byte " + std::to_string(nul), "a NUL byte: JSON is text");
    // nlohmann's parser recurses per nesting level; a hostile file of a million '[' would
    // overflow the stack, so the callback refuses deep nesting before the recursion gets there.
    const auto limitDepth = [&](int depth, json::parse_event_t, json &) {
        if (depth > maxDepth)
            throw InputError(ctx, "nesting depth " + std::to_string(depth),
                             "nested deeper than " + std::to_string(maxDepth) + " levels");
        return true;
    };
    try {
        return json::parse(text, limitDepth);
    } catch (const json::parse_error &e) {
        throw InputError(ctx, "(" + std::to_string(text.size()) + " bytes)",
                         std::string("not valid JSON: ") + e.what());
    } catch (const json::out_of_range &e) { // a number too large for a double (1e400)
        throw InputError(ctx, "(" + std::to_string(text.size()) + " bytes)",
                         std::string("not valid JSON: ") + e.what());
    }
}

std::string stringOr(const json &obj, const std::string &key, const std::string &fallback)
{
    if (!obj.is_object())
        return fallback;
    const auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

json readJsonFile(const std::string &path, const std::string &field, size_t maxBytes)
{
    return parseUntrusted(readRegularFile(path, field, maxBytes), field, maxBytes);
}

} // namespace headroom
