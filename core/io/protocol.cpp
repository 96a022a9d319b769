#include "headroom/protocol.h"

#include "headroom/error.h"
#include "headroom/serialize.h"

#include <csignal>
#include <cstring>

namespace headroom::protocol {

using nlohmann::json;

std::string exitCodeMeaning(int code)
{
    switch (code) {
    case Ok: return "ok";
    case BadRequest: return "bad request";
    case OutOfMemory: return "out of memory";
    case NoDevice: return "no usable device or package";
    case Internal: return "internal error";
    default: break;
    }
    if (code > kStoppedBase && code < kStoppedBase + 64) {
        const int sig = code - kStoppedBase;
        if (sig == SIGTERM)
            return "stopped by SIGTERM";
        if (sig == SIGINT)
            return "stopped by SIGINT";
        return "stopped by signal " + std::to_string(sig);
    }
    return "exit code " + std::to_string(code);
}

std::string_view toString(Engine e)
{
    return e == Engine::Transformers ? "transformers" : "libtorch";
}

Engine parseEngine(std::string_view s, const std::string &field)
{
    if (s == "libtorch")
        return Engine::LibTorch;
    if (s == "transformers")
        return Engine::Transformers;
    throw InputError(field, std::string(s), "unknown engine (accepted: libtorch, transformers)");
}

namespace {

std::string show(const json &v) { return showJson(v); }
int intField(const json &j, const char *key, int lo, int hi, int fallback)
{
    if (!j.contains(key))
        return fallback;
    const json &v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        throw InputError(std::string("event.") + key, show(v).substr(0, 40),
                         "must be a whole number between " + std::to_string(lo) + " and " + std::to_string(hi));
    return static_cast<int>(v.get<int64_t>());
}

std::string stringField(const json &j, const char *key, size_t maxLen)
{
    if (!j.contains(key) || j.at(key).is_null())
        return {};
    if (!j.at(key).is_string())
        throw InputError(std::string("event.") + key, show(j.at(key)).substr(0, 40), "must be a string");
    std::string s = j.at(key).get<std::string>();
    if (s.size() > maxLen)
        s = s.substr(0, maxLen) + "...";
    return s;
}

} // namespace

Line parseLine(std::string_view text)
{
    Line line;
    json j;
    try {
        j = parseUntrusted(std::string(text), "probe output", kMaxLineBytes);
    } catch (const InputError &) {
        return line; // not JSON: a library's print, not ours
    }
    if (!j.is_object() || !j.contains("event") || !j.at("event").is_string())
        return line;
    const std::string ev = j.at("event").get<std::string>();
    try {
        if (ev == event::kProgress) {
            line.kind = Line::Kind::Progress;
            Progress &p = line.progress;
            p.step = intField(j, "step", 0, 1000, 0);
            if (j.contains("phase")) {
                if (!j.at("phase").is_string())
                    throw InputError("event.phase", show(j.at("phase")).substr(0, 40), "must be a string");
                p.phase = parsePhase(j.at("phase").get<std::string>(), "event.phase");
            }
            p.microBatch = intField(j, "micro_batch", 0, 1 << 20, 0);
            p.layer = intField(j, "layer", -1, 1 << 24, -1);
            p.layers = intField(j, "layers", 0, 1 << 24, 0);
            if (j.contains("fraction")) {
                if (!j.at("fraction").is_number())
                    throw InputError("event.fraction", show(j.at("fraction")).substr(0, 40), "must be a number");
                const double f = j.at("fraction").get<double>();
                p.fraction = f < 0 ? 0.0 : f > 1 ? 1.0 : f;
            }
        } else if (ev == event::kResult) {
            line.kind = Line::Kind::Result;
            line.result = measurementFromJson(j);
        } else if (ev == event::kError) {
            line.kind = Line::Kind::Error;
            line.error.code = intField(j, "code", 0, 255, Internal);
            line.error.field = stringField(j, "field", 200);
            line.error.message = stringField(j, "message", 2000);
            if (line.error.message.empty())
                line.error.message = "(no message)";
        } else if (ev == event::kStopped) {
            line.kind = Line::Kind::Stopped;
            line.signal = intField(j, "signal", 0, 64, SIGTERM);
        } else if (ev == event::kRendezvous) {
            line.kind = Line::Kind::Rendezvous;
            line.port = intField(j, "port", 0, 65535, 0);
        } else {
            return line; // an event this reader does not know: not ours to act on
        }
    } catch (const InputError &e) {
        line.kind = Line::Kind::Malformed;
        line.problem = e.what();
        line.result.reset();
    } catch (const json::exception &e) {
        line.kind = Line::Kind::Malformed;
        line.problem = std::string("probe output: ") + e.what();
        line.result.reset();
    }
    return line;
}

Measurement readResultFile(const std::string &path)
{
    json j = readJsonFile(path, "result");
    return measurementFromJson(j);
}

std::string describe(const Progress &p)
{
    std::string s = "step " + std::to_string(p.step) + " · " + std::string(toString(p.phase));
    if (p.microBatch > 0)
        s += " · micro-batch " + std::to_string(p.microBatch + 1);
    if (p.layer >= 0 && p.layers > 0)
        s += " · layer " + std::to_string(p.layer + 1) + " of " + std::to_string(p.layers);
    return s;
}

} // namespace headroom::protocol
