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

Outcome run(const ProbeRequest &request, const Callbacks &callbacks, const Dist &dist = {});

} // namespace headroom::probe
