#pragma once
// Memory over one training run as an ordered stream of allocations and frees: what the
// estimator predicts (estimateTimeline) and what the transformers engine records from
// torch.cuda.memory._record_memory_history (--timeline, "probe_timeline"). Both replay through
// the caching allocator model (allocator.h) to give peak reserved.

#include "headroom/allocator.h"
#include "headroom/types.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace headroom {

// What PyTorch's caching allocator holds before the program's first tensor: 1 MiB, allocated at
// CUDA initialisation. Measured: every H200 run of the corpus, PyTorch 2.11 (the allocated bytes
// at each phase mark minus the recorded stream's, tests/tst_allocator.cpp).
constexpr int64_t kTorchStartupBytes = 0;

// The part of a composite model a tensor belongs to (Note [Vision share]): the vision tower with its
// projector (their weights, gradients, optimizer state, activations and temporaries, the features
// they hand on), or the rest. A text model's every tensor is the language model's.
enum class ModelPart : uint8_t { Language, Vision };

struct MemEvent
{
    // EmptyCache: torch.cuda.empty_cache() (or the release before an OOM retry): every wholly
    // free cached segment goes back to the device. A recorded stream shows it as segment frees.
    enum Kind : uint8_t { Alloc, Free, EmptyCache };
    Kind kind = Alloc;
    Category category = Category::Temporaries;
    int16_t layer = -1;   // decoder layer, -1 outside the layers
    uint16_t op = 0;      // index into Timeline::ops
    uint8_t stream = 0;   // CUDA stream of an allocation: 0 the default one (FSDP2's side streams 1..)
    ModelPart part = ModelPart::Language; // which part of the model the tensor belongs to
    uint32_t id = 0;      // the allocation's id; a free names the id it frees
    int64_t bytes = 0;    // requested bytes (the allocator rounds)
};

// The start of a phase in the event stream.
struct TimelineMark
{
    int step = 0;
    Phase phase = Phase::Forward;
    int microBatch = 0;
    size_t event = 0; // index of the first event of the phase
};

struct Timeline
{
    std::string source;            // "estimate" or "measured"
    std::vector<MemEvent> events;
    std::vector<std::string> ops;  // what made each allocation: an HF code line or an op name
    std::vector<TimelineMark> marks;
    int steadyStep = 1;            // the step whose phases the estimate reports
    int64_t startupBytes = 0;      // allocated before the first event (PyTorch's own, at CUDA init)
    // A recorded run's cudaMalloc segments (address, bytes) in order, for the replay
    // (CachingAllocatorModel::useSegmentAddresses); empty for an estimate.
    std::vector<std::pair<int64_t, int64_t>> segments;
};

// Per phase of the run, what the caching allocator does with the stream.
struct ReplayPhase
{
    TimelineMark mark;
    int64_t peakAllocatedBytes = 0;
    int64_t peakReservedBytes = 0;
    int64_t endAllocatedBytes = 0;
    int64_t endReservedBytes = 0;
    size_t peakEvents = 0; // events applied when the phase's allocated peak is reached
};

struct Replay
{
    std::vector<ReplayPhase> phases;
    int64_t peakAllocatedBytes = 0; // over the steady step
    int64_t peakReservedBytes = 0;  // over the whole run (segments are never given back)
    int64_t retries = 0;
    bool outOfMemory = false;
    size_t oomEvent = 0;
};

// Appends the stream's last step again, as the step after it, when that step is closed: every
// tensor it frees it allocated, and it frees all of them, so the program's next step (the same
// code in the same steady state) emits the same events with new ids. The estimate uses it to
// replay a second steady step through the allocator (the cache can still grow in it) without
// simulating the step again. Returns false, leaving `t` as it was, when the step is not closed.
bool repeatLastStep(Timeline &t);

// Replays `t` through the allocator model with `config` (its capacity decides an OOM).
Replay replay(const Timeline &t, const AllocatorConfig &config = {});

// One sample per event of the steady step: the live bytes by category, for the Timeline tab.
struct TimelineSample
{
    size_t event = 0;
    std::array<int64_t, kCategoryCount> bytes{};
};
std::vector<TimelineSample> stackedSamples(const Timeline &t, int step, size_t maxSamples = 2000);

// The largest tensors alive after the first `event` events, biggest first (hover in the Timeline tab).
struct LiveTensor
{
    int64_t bytes = 0; // rounded as the allocator rounds
    Category category = Category::Temporaries;
    int layer = -1;
    std::string op;
};
std::vector<LiveTensor> largestLiveAt(const Timeline &t, size_t event, size_t count = 8);

// The steady step's phases as [first event, end event) ranges, in order.
struct PhaseSpan
{
    Phase phase = Phase::Forward;
    size_t first = 0;
    size_t end = 0;
};
std::vector<PhaseSpan> stepPhases(const Timeline &t, int step);

// The probe's --timeline file (schema_version 1, kind probe_timeline). Throws InputError.
Timeline timelineFromJson(const nlohmann::json &j);
Timeline readTimelineFile(const std::string &path);
nlohmann::json toJson(const Timeline &t);

} // namespace headroom
