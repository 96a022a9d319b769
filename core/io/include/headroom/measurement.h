#pragma once

#include "headroom/estimator.h"
#include "headroom/model.h"
#include "headroom/timeline.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace headroom {

// What the GUI or CLI asks headroom-probe to run (docs/probe-protocol.md).
struct ProbeRequest
{
    ModelArch model;
    TrainingConfig config;
    int steps = 2;              // measured steps after one warm-up step, at most (see earlyStop)
    // The LibTorch engine on CUDA may stop after a measured step when the allocator model, exact on
    // every phase run so far, shows the next step repeats it (nextStepRepeats). False: run them all.
    bool earlyStop = true;
    std::string device = "auto"; // auto | cuda | cpu
    std::string engine = "libtorch"; // libtorch | transformers (headroom-probe --engine overrides)
};

// The one sign convention for an estimate against a measurement, everywhere (CLI compare, GUI,
// sheets, the accuracy test): (estimated - measured) / measured. Negative: the estimate is under,
// the run needs more than it says (an OOM risk). 0 when nothing was measured.
double relativeError(int64_t estimated, int64_t measured);

nlohmann::json toJson(const ProbeRequest &r);
ProbeRequest probeRequestFromJson(const nlohmann::json &j);

struct PhaseMeasurement
{
    int step = 0; // 0 is the warm-up step
    Phase phase = Phase::Forward;
    int microBatch = 0; // with gradient accumulation: which micro-batch's forward or backward
    int64_t peakAllocatedBytes = 0;
    int64_t peakReservedBytes = 0;
    int64_t allocatedBytes = 0; // at the end of the phase
    int64_t reservedBytes = 0;
    int64_t deviceUsedBytes = 0;  // cudaMemGetInfo total - free (0 on CPU)
    int64_t deviceTotalBytes = 0;
    int64_t processUsedBytes = 0; // this process's device memory from NVML (0 when unknown)
    int64_t allocRetries = 0;
    int64_t ooms = 0;
    double seconds = 0.0;
    // Not run: a step the early stop showed repeats a measured one (repeatedStep), its numbers that step's.
    bool replayed = false;
};

struct OomReport
{
    int step = 0;
    Phase phase = Phase::Forward;
    int64_t requestedBytes = 0;
    int64_t inUseBytes = 0;
    std::string message;
};

// One rank of a multi-process run (headroom-probe --nproc): its steady per-phase peaks.
struct RankPeak
{
    int rank = 0;
    std::string deviceName;
    std::vector<PhaseMeasurement> phases; // after_load, forward, backward, optimizer (steady peaks)
    int64_t peakAllocatedBytes = 0;
    int64_t peakReservedBytes = 0;
    int64_t deviceTotalBytes = 0; // peak reserved + CUDA context (0 context on CPU)
    Phase peakPhase = Phase::Forward;
    double parametersSum = 0.0; // sum of every parameter after the last step: equal on all ranks
    bool oom = false;
};

struct Measurement
{
    std::string engine = "libtorch"; // libtorch | transformers: who ran the step
    // The transformers engine's provenance: versions, model class, parameter counts, sharding.
    nlohmann::json engineInfo = nlohmann::json::object();
    bool sharedDevice = false; // several ranks ran on one GPU (--share-gpu)
    std::string device;     // cuda | cpu
    std::string deviceName; // "NVIDIA H200", or the CPU model
    std::string driver;
    std::string torchVersion;
    std::string headroomVersion;
    std::string createdAt;  // ISO 8601, UTC
    ModelArch model;
    TrainingConfig config;
    int warmupSteps = 1;
    // Measured steps not run because the allocator replay of the run showed the next step repeats
    // the last one (ProbeRequest::earlyStop); 0 when every requested step ran.
    int skippedSteps = 0;
    std::vector<PhaseMeasurement> phases; // every phase of every step, in order
    Breakdown attribution;                // bytes by category at the steady-state peak
    // Whether the engine split the peak by category. Without an attribution pass (post-training
    // steps, --no-attribution) its result holds the whole peak as temporaries: no weights at all,
    // which an attributed peak always has.
    bool attributed() const
    {
        return attribution[Category::Weights] > 0 || attribution[Category::Temporaries] != peakAllocatedBytes;
    }
    // The same at each steady phase's peak (forward, backward, optimizer; none for after_load),
    // when the engine reported it ("phase_attribution").
    std::array<std::optional<Breakdown>, kPhaseCount> phaseAttribution;
    int64_t peakAllocatedBytes = 0;       // steady state: max over measured steps
    int64_t peakReservedBytes = 0;
    int64_t cudaContextBytes = 0;         // device used - reserved, on CUDA
    Phase peakPhase = Phase::Forward;
    std::optional<OomReport> oom;
    double wallSeconds = 0.0;
    double initSeconds = 0.0;   // CUDA / runtime initialisation
    double buildSeconds = 0.0;  // model construction
    double stepsSeconds = 0.0;
    std::string note;
    // Several processes (--nproc): the backend and every rank's peaks. The measurement above is
    // the rank with the highest peak, the card that decides whether the run fits.
    std::string backend; // gloo | nccl; empty for a single process
    std::vector<RankPeak> ranks;

    int64_t deviceTotalBytes() const { return peakReservedBytes + cudaContextBytes; }
    // The steady-state peak of one phase (max over measured steps; after_load is measured once,
    // before the warm-up); nullopt if never measured.
    std::optional<PhaseMeasurement> steady(Phase p) const;
};

// One entry of PyTorch's caching-allocator trace (c10 CUDACachingAllocator's TraceEntry, as the
// LibTorch probe receives it from attachAllocatorTraceTracker): an allocation of `bytes` requested
// bytes at `address`, a free that completed (the block is back in the pool), a segment cudaMalloc
// made (where, and how big), or a segment given back to the device (empty_cache, or the release
// before an out-of-memory retry).
struct AllocatorTraceEntry
{
    enum Kind : uint8_t { Alloc, Free, SegmentAlloc, SegmentFree };
    Kind kind = Alloc;
    uint64_t address = 0;
    int64_t bytes = 0;
};
// The trace as an allocation stream: ids by address, a free of an address never allocated in the
// trace dropped, a burst of segment frees one EmptyCache, the segments' addresses in
// Timeline::segments. `marks[i].event` index the trace; in the result they index the stream.
Timeline timelineFromTrace(const std::vector<AllocatorTraceEntry> &trace, std::vector<TimelineMark> marks);

// The LibTorch probe's early stop (issue 11): after a measured steady step, will the next step
// repeat it? The caching allocator is deterministic: the next step asks for the same blocks in the
// same order from the state this one left. `t` is the whole run's trace so far (from before the
// model was built), `measured` the phases the probe measured on it. The allocator model replays
// `t`; unless it gives every measured phase's peak allocated and peak reserved to the byte, it
// cannot vouch for this run (nullopt, with the first difference in `why`). Otherwise the last step
// is repeated (repeatLastStep) and replayed: true when each of its phases peaks at the last step's
// allocated bytes and it reserves nothing beyond what the last step ended with. Checked against
// the 158 recorded H200 runs (tst_allocator): it never says "repeats" of a step that grew.
std::optional<bool> nextStepRepeats(const Timeline &t, const AllocatorConfig &config,
                                    const std::vector<PhaseMeasurement> &measured, std::string *why = nullptr);
// The phases of a step that repeats measured step `step`, numbered `as` and marked replayed: the
// same peaks allocated, and as reserved the cache `step` ended with (a phase starts from it).
std::vector<PhaseMeasurement> repeatedStep(const std::vector<PhaseMeasurement> &phases, int step, int as);

// max/min of the ranks' peak allocated bytes (1 for fewer than two ranks).
double rankSpread(const Measurement &m);

// What the LibTorch probe can count of its own step without the allocator's trace, at the
// steady-state peak: the weights, DDP's buckets, the optimizer state, every trainable
// parameter's gradient, what was resident when a step began (weights, state, workspaces), what
// the forward kept, and the fp32 log-probabilities among that (batch x seq x vocab x 4).
struct PeakAccounts
{
    int64_t weightBytes = 0;
    int64_t communicationBytes = 0;
    int64_t optimizerStateBytes = 0;
    int64_t gradientBytes = 0;
    int64_t residentBytes = 0;
    int64_t keptAfterForwardBytes = 0;
    int64_t logprobBytes = 0;
};
// The steady-state peak (max over the measured steps' forward, backward and optimizer phases)
// into m.peakAllocatedBytes, m.peakPhase and m.peakReservedBytes.
void settleSteadyPeak(Measurement &m);
// The peak split into categories: gradients when it came in the optimizer step or at the end of
// backward, else activations and logits; what no category names is temporaries.
Breakdown attributePeak(const PeakAccounts &a, int64_t peakAllocatedBytes, Phase peakPhase);
// The same at each steady phase's peak (forward, backward, optimizer) into m.phaseAttribution.
void attributePhases(Measurement &m, const PeakAccounts &a);
// The criterion: ranks of one data-parallel run should agree within 1%.
constexpr double kUnevenSpread = 1.01;
// What one rank reports about itself, from its own phases.
RankPeak rankPeak(const Measurement &m, int rank);
// Every rank's result into one: the worst rank's measurement, with all ranks listed in order.
// Throws InputError if the ranks are not one run (configs differ, ranks missing or repeated).
Measurement mergeRanks(std::vector<Measurement> perRank);

// Who measured, in one line: "transformers engine (Transformers 5.17.0, PEFT 0.21.0, PyTorch 2.11.0)".
std::string engineProvenance(const Measurement &m);

nlohmann::json toJson(const Measurement &m);
// Strict: every problem names the field, e.g. "result.phases[3].peak_allocated_bytes".
Measurement measurementFromJson(const nlohmann::json &j);

} // namespace headroom
