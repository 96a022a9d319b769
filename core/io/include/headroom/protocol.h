#pragma once
// headroom-probe's protocol, once for every party: the GUI's runner, the CLI, the probe's
// launchers and both engines' tests (docs/probe-protocol.md; the JSON Schema that the Python
// engine is checked against is resources/probe-protocol.schema.json).

#include "headroom/measurement.h"
#include "headroom/model.h"

#include <optional>
#include <string>
#include <string_view>

namespace headroom::protocol {

// Exit codes of headroom-probe, whatever the engine.
enum ExitCode : int { Ok = 0, BadRequest = 2, OutOfMemory = 3, NoDevice = 4, Internal = 5 };
// 128 + signal: stopped by SIGTERM (143) or SIGINT (130).
constexpr int kStoppedBase = 128;
// A stopped probe gives the transformers engine's process group this long after SIGTERM before it
// sends SIGKILL (engine_launcher.cpp); whoever stops the probe waits longer than that before
// killing it, or the engine, in its own group, outlives both (issue 32, row 6).
constexpr int kEngineStopGraceMs = 2000;
constexpr int kProbeStopGraceMs = kEngineStopGraceMs + 1500;

// What an exit code means, in words for a person ("bad request", "stopped by SIGTERM", ...).
std::string exitCodeMeaning(int code);
// True for the codes that come with a result line (ok, out of memory).
inline bool hasResult(int code) { return code == Ok || code == OutOfMemory; }

// The engines: LibTorch (our own re-implementation, fast) and transformers (the user's stack).
enum class Engine { LibTorch, Transformers };
std::string_view toString(Engine e);
Engine parseEngine(std::string_view s, const std::string &field = "--engine");


// Event kinds on stdout, one JSON object per line.
namespace event {
constexpr const char *kProgress = "progress";
constexpr const char *kResult = "result";
constexpr const char *kError = "error";
constexpr const char *kStopped = "stopped";
constexpr const char *kRendezvous = "rendezvous"; // launcher-internal: rank 0's store port
} // namespace event

// Longest line any party accepts: a result of many ranks stays far below it.
constexpr size_t kMaxLineBytes = 32u << 20;

struct Progress
{
    int step = 0;
    Phase phase = Phase::Forward;
    int microBatch = 0;
    int layer = -1;  // decoder layer within the phase, -1 when the event is at a phase start
    int layers = 0;
    double fraction = 0.0; // of the whole run, 0..1
};

struct ErrorEvent
{
    int code = Internal;
    std::string field;
    std::string message;
};

// One line of probe output, read strictly: every problem names its field. A line that is not
// JSON, or not an object with a known "event", is Kind::NotProtocol (a library's print).
struct Line
{
    enum class Kind { Progress, Result, Error, Stopped, Rendezvous, NotProtocol, Malformed };
    Kind kind = Kind::NotProtocol;
    Progress progress;
    ErrorEvent error;
    std::optional<Measurement> result;
    int signal = 0; // stopped
    int port = 0;   // rendezvous
    std::string problem; // Malformed: which field was wrong, one line
};

Line parseLine(std::string_view text);

// A result file (--out, an imported measurement), bounded in size and depth.
Measurement readResultFile(const std::string &path);

// A progress event's line for a person: "step 1 · backward · layer 12 of 32".
std::string describe(const Progress &p);

} // namespace headroom::protocol
