#pragma once
// The boundary between the Torch-free driver (probe_main.cpp) and the Torch code (probe_torch.cpp).

#include "headroom/measurement.h"
#include "headroom/protocol.h"

#include <atomic>
#include <functional>

namespace headroom::probe {

// The protocol's exit codes (core/include/headroom/protocol.h), under the names this code uses.
using ExitCode = protocol::ExitCode;
constexpr ExitCode Ok = protocol::Ok;
constexpr ExitCode BadRequest = protocol::BadRequest;
constexpr ExitCode OutOfMemory = protocol::OutOfMemory;
constexpr ExitCode NoDevice = protocol::NoDevice;
constexpr ExitCode Internal = protocol::Internal;

struct Callbacks
{
    std::function<void(int step, Phase phase, double fraction)> progress;
    const std::atomic<bool> *stop = nullptr; // set by SIGTERM / SIGINT
    bool snapshot = false; // --snapshot: capture the live allocator blocks nearest the peak
};

struct Outcome
{
    ExitCode code = Ok;
    bool stopped = false;
    std::string message;
    Measurement measurement;
    nlohmann::json snapshot; // null unless Callbacks::snapshot (docs/probe-protocol.md)
};

// One rank of a multi-process run (--nproc): the launcher starts one process per rank, and the
// ranks rendezvous through c10d's TCPStore on 127.0.0.1:port (docs/probe-protocol.md).
struct Dist
{
    bool enabled = false;
    int rank = 0;
    int worldSize = 1;
    int port = 0; // rank 0 with port 0: serve the store on a free port and announce it
    std::function<void(int port)> announce;
};

// True if this build can run several ranks (c10d with Gloo, and NCCL on CUDA builds).
bool distributedAvailable(std::string *why);

// ---------------------------------------------------------------- the LibTorch engine
// The LibTorch engine is a module, headroom-probe-torch.so (probe_torch.cpp), that the driver loads
// only when a request needs it (torch_module.cpp): `--help`, a refused request and the transformers
// engine never load Torch's libraries, and on a GPU the CUDA context is created on another thread
// while they load (prepareCuda), instead of after them.
Outcome run(const ProbeRequest &request, const Callbacks &callbacks, const Dist &dist = {});
// False when the module is absent (a build without LibTorch) or cannot load; `why` says which.
bool libtorchAvailable(std::string *why = nullptr);
// True if the LibTorch engine would run on a GPU here (a CUDA build and a usable device): "auto"
// falls back to the CPU otherwise, and a CPU run is checked against host memory first.
bool cudaUsable();
// Starts creating the CUDA driver's primary context for device 0 on a thread of its own (the
// runtime then finds it made). Nothing happens without a driver or a device, or when
// HEADROOM_PROBE_EARLY_CONTEXT=0. Call it before the module loads.
void prepareCuda();

// What the module exports (headroom_probe_torch_engine): the engine's entry points, and what the
// driver checks before using them (the module and the driver come from one build).
struct TorchEngine
{
    const char *version;   // HEADROOM_VERSION
    size_t outcomeBytes;   // sizeof(Outcome)
    size_t requestBytes;   // sizeof(ProbeRequest)
    Outcome (*run)(const ProbeRequest &, const Callbacks &, const Dist &);
    bool (*cudaUsable)();
    bool (*distributedAvailable)(std::string *why);
};

// ---------------------------------------------------------------- the driver's output
// One JSON object per line on stdout (probe_main.cpp).
extern std::atomic<bool> g_stop;
extern std::atomic<int> g_signal;
void emit(const nlohmann::json &j);
// An error event (and the message on stderr); returns `code`.
int fail(int code, const std::string &message, const std::string &field = {});
// The result line, and --out's copy of it; false (after saying so) if the copy cannot be written.
bool publish(const nlohmann::json &result, const std::string &outPath);
// The stopped event; returns 128 + signal.
int stopped();
// The folder this executable is in (where the build tree keeps its engine script and module).
std::string selfDir();
// Writes `j` to `path` through a temporary file in the same folder, checking every write.
bool writeAtomically(const std::string &path, const nlohmann::json &j);

// ---------------------------------------------------------------- the transformers engine
struct EngineOptions
{
    std::string python;        // --python, else $HEADROOM_PYTHON, else python3 on PATH
    std::string modelFactory;  // --model-factory: build the model with this Python file
    std::string snapshotPath;
    std::string timelinePath;
    std::string allocConf;
    std::string outPath;
    std::string sharding = "fsdp"; // fsdp | deepspeed
    int64_t memoryCapBytes = 0;
    bool shareGpu = false;
    bool stepsGiven = false;
    // --trace: the step on fake tensors (no memory used), its allocations to timelinePath; the
    // engine prints progress and no result (core replays the timeline: headroom-cli estimate).
    bool trace = false;
    // --trace-by-depth: three shallow depths traced and extrapolated (Note [Traced depth], experimental)
    bool traceByDepth = false;
    // --trace-ranks: several GPUs under FSDP2 traced as rank 0 (Note [Traced ranks], experimental)
    bool traceRanks = false;
};

// Runs headroom_engine.py (one process, or one per rank under torchrun) and passes its
// protocol on, every line checked by core's reader. Returns the exit code.
int runTransformersEngine(const ProbeRequest &request, const EngineOptions &options);

// --serve SOCKET: becomes the transformers engine's warm worker on that Unix socket (the same
// interpreter and script a run would use; docs/estimator.md Note [Warm worker]). Returns only on
// failure, with the exit code.
int serveTransformersEngine(const std::string &python, const std::string &socketPath, int idleSeconds);

} // namespace headroom::probe
