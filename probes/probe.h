#pragma once
// The boundary between the Torch-free driver (probe_main.cpp) and the Torch code (probe_torch.cpp).

#include "headroom/measurement.h"

#include <atomic>
#include <functional>

namespace headroom::probe {

enum ExitCode { Ok = 0, BadRequest = 2, OutOfMemory = 3, NoDevice = 4, Internal = 5 };

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

Outcome run(const ProbeRequest &request, const Callbacks &callbacks);

} // namespace headroom::probe
