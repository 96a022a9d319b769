#include "headroom/timeline.h"

#include "headroom/error.h"
#include "headroom/json_input.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace headroom {

using nlohmann::json;

namespace {

constexpr int64_t kMaxBytes = int64_t(1) << 56;

std::string show(const json &v) { return showJson(v, 60); }

// The last step of `t` (its first mark and first event) when it is closed: each free names an
// allocation of the step, and nothing the step allocates outlives it. Also the stream's largest
// id and the step's smallest.
struct LastStep
{
    size_t firstMark = 0, first = 0;
    uint32_t maxId = 0, minId = 0;
};
std::optional<LastStep> closedLastStep(const Timeline &t)
{
    if (t.marks.empty() || t.marks.back().phase == Phase::AfterLoad)
        return std::nullopt;
    const int step = t.marks.back().step;
    LastStep r;
    r.firstMark = t.marks.size();
    while (r.firstMark > 0 && t.marks[r.firstMark - 1].step == step && t.marks[r.firstMark - 1].phase != Phase::AfterLoad)
        --r.firstMark;
    r.first = t.marks[r.firstMark].event;
    const size_t end = t.events.size();
    uint32_t minId = UINT32_MAX;
    for (const MemEvent &e : t.events)
        r.maxId = std::max(r.maxId, e.id);
    for (size_t i = r.first; i < end; ++i)
        if (t.events[i].kind == MemEvent::Alloc)
            minId = std::min(minId, t.events[i].id);
    if (minId == UINT32_MAX)
        return std::nullopt;
    r.minId = minId;
    std::vector<uint8_t> mine(size_t(r.maxId - minId) + 1, 0); // 1 allocated in the step and live, 2 freed
    for (size_t i = r.first; i < end; ++i) {
        const MemEvent &e = t.events[i];
        if (e.kind == MemEvent::EmptyCache)
            continue;
        if (e.id < minId)
            return std::nullopt;
        uint8_t &st = mine[e.id - minId];
        if (e.kind == MemEvent::Alloc) {
            if (st != 0)
                return std::nullopt;
            st = 1;
        } else {
            if (st != 1)
                return std::nullopt;
            st = 2;
        }
    }
    if (std::any_of(mine.begin(), mine.end(), [](uint8_t st) { return st == 1; }))
        return std::nullopt;
    if (uint64_t(r.maxId) + (uint64_t(r.maxId) + 1 - minId) >= UINT32_MAX)
        return std::nullopt; // no room for a copy's ids
    return r;
}
} // namespace

// See Note [Repeated steady step] (docs/estimator.md).
bool repeatLastStep(Timeline &t)
{
    const std::optional<LastStep> ls = closedLastStep(t);
    if (!ls)
        return false;
    const int step = t.marks.back().step;
    const size_t firstMark = ls->firstMark, first = ls->first, end = t.events.size();
    const uint32_t maxId = ls->maxId, minId = ls->minId;
    const uint64_t shift = uint64_t(maxId) + 1 - minId; // the copy's ids follow every id of the stream
    t.events.reserve(end + (end - first));
    for (size_t i = first; i < end; ++i) {
        MemEvent e = t.events[i];
        if (e.kind != MemEvent::EmptyCache)
            e.id = static_cast<uint32_t>(e.id + shift);
        t.events.push_back(e);
    }
    const size_t marks = t.marks.size();
    for (size_t k = firstMark; k < marks; ++k) {
        TimelineMark mk = t.marks[k];
        mk.step = step + 1;
        mk.event += end - first;
        t.marks.push_back(mk);
    }
    return true;
}

Replay replay(const Timeline &t, const AllocatorConfig &config)
{
    CachingAllocatorModel m(config);
    if (!config.expandableSegments) // mapped pages, not segments, with expandable segments
        m.useSegmentAddresses(t.segments);
    Replay r;
    uint32_t startupId = 0; // one past the stream's ids
    for (const auto &e : t.events)
        startupId = std::max(startupId, e.id + 1);
    if (t.startupBytes > 0)
        m.malloc(startupId, t.startupBytes);
    size_t mi = 0;
    std::optional<ReplayPhase> open;
    size_t peakEvent = 0;
    int64_t phasePeak = -1;
    auto close = [&](size_t at) {
        if (!open)
            return;
        open->peakAllocatedBytes = std::max(phasePeak, m.allocatedBytes());
        open->peakReservedBytes = m.peakReservedBytes();
        open->endAllocatedBytes = m.allocatedBytes();
        open->endReservedBytes = m.reservedBytes();
        open->peakEvents = phasePeak >= 0 ? peakEvent : at;
        if (open->mark.step == t.steadyStep)
            r.peakAllocatedBytes = std::max(r.peakAllocatedBytes, open->peakAllocatedBytes);
        r.phases.push_back(*open);
        open.reset();
    };
    for (size_t i = 0; i <= t.events.size(); ++i) {
        while (mi < t.marks.size() && t.marks[mi].event <= i) {
            close(i);
            m.resetPeaks();
            open = ReplayPhase{};
            open->mark = t.marks[mi];
            phasePeak = m.allocatedBytes();
            peakEvent = i;
            ++mi;
        }
        if (i == t.events.size())
            break;
        const MemEvent &e = t.events[i];
        if (e.kind == MemEvent::Alloc) {
            if (!m.malloc(e.id, e.bytes, e.stream)) {
                r.outOfMemory = true;
                r.oomEvent = i;
                break;
            }
            if (m.allocatedBytes() > phasePeak) {
                phasePeak = m.allocatedBytes();
                peakEvent = i + 1; // the state after this allocation
            }
        } else if (e.kind == MemEvent::Free) {
            m.free(e.id);
        } else {
            m.emptyCache();
        }
    }
    close(t.events.size());
    r.peakReservedBytes = m.peakReservedBytes();
    for (const auto &p : r.phases)
        r.peakReservedBytes = std::max(r.peakReservedBytes, p.peakReservedBytes);
    r.retries = m.allocRetries();
    return r;
}

std::vector<TimelineSample> stackedSamples(const Timeline &t, int step, size_t maxSamples)
{
    size_t first = t.events.size(), last = t.events.size();
    for (size_t i = 0; i < t.marks.size(); ++i) {
        if (t.marks[i].step == step && first == t.events.size())
            first = t.marks[i].event;
        if (t.marks[i].step == step + 1) {
            last = t.marks[i].event;
            break;
        }
    }
    std::vector<int64_t> size;
    std::vector<uint8_t> cat;
    TimelineSample cur;
    cur.bytes[static_cast<size_t>(Category::Temporaries)] = t.startupBytes;
    std::vector<TimelineSample> out;
    const size_t span = last > first ? last - first : 0;
    const size_t stride = std::max<size_t>(1, span / std::max<size_t>(1, maxSamples));
    TimelineSample best; // the highest moment in the current stride, so peaks are never dropped
    int64_t bestTotal = -1;
    for (size_t i = 0; i < last; ++i) {
        const MemEvent &e = t.events[i];
        if (e.id >= size.size()) {
            size.resize(std::max<size_t>(e.id + 1, size.size() * 2), 0);
            cat.resize(size.size(), 0);
        }
        const int64_t b = CachingAllocatorModel::roundSize(e.bytes);
        if (e.kind == MemEvent::Alloc) {
            size[e.id] = b;
            cat[e.id] = static_cast<uint8_t>(e.category);
            cur.bytes[cat[e.id]] += b;
        } else if (e.kind == MemEvent::Free) {
            cur.bytes[cat[e.id]] -= size[e.id];
            size[e.id] = 0;
        }
        if (i < first)
            continue;
        cur.event = i;
        int64_t total = 0;
        for (auto v : cur.bytes)
            total += v;
        if (total > bestTotal) {
            best = cur;
            bestTotal = total;
        }
        if ((i - first + 1) % stride == 0 || i + 1 == last) {
            out.push_back(best);
            bestTotal = -1;
        }
    }
    return out;
}

std::vector<LiveTensor> largestLiveAt(const Timeline &t, size_t event, size_t count)
{
    std::unordered_map<uint32_t, size_t> live; // id -> its allocation's event
    const size_t n = std::min(event, t.events.size());
    for (size_t i = 0; i < n; ++i) {
        const MemEvent &e = t.events[i];
        if (e.kind == MemEvent::Alloc)
            live[e.id] = i;
        else if (e.kind == MemEvent::Free)
            live.erase(e.id);
    }
    std::vector<LiveTensor> out;
    out.reserve(live.size());
    for (const auto &[id, at] : live) {
        const MemEvent &e = t.events[at];
        out.push_back({CachingAllocatorModel::roundSize(e.bytes), e.category, e.layer,
                       e.op < t.ops.size() ? t.ops[e.op] : std::string()});
    }
    const size_t k = std::min(count, out.size());
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(),
                      [](const LiveTensor &a, const LiveTensor &b) { return a.bytes > b.bytes; });
    out.resize(k);
    return out;
}

std::vector<PhaseSpan> stepPhases(const Timeline &t, int step)
{
    std::vector<PhaseSpan> out;
    for (size_t i = 0; i < t.marks.size(); ++i) {
        const TimelineMark &m = t.marks[i];
        if (m.step != step || m.phase == Phase::AfterLoad)
            continue;
        PhaseSpan p{m.phase, m.event, i + 1 < t.marks.size() ? t.marks[i + 1].event : t.events.size()};
        if (!out.empty() && out.back().phase == p.phase) // micro-batches: one span per phase kind in a row
            out.back().end = p.end;
        else
            out.push_back(p);
    }
    return out;
}

Timeline timelineFromJson(const json &j)
{
    const std::string ctx = "timeline";
    requireSchema(j, ctx);
    if (!j.contains("kind") || j.at("kind") != "probe_timeline")
        throw InputError(ctx + ".kind", j.contains("kind") ? show(j.at("kind")) : "(missing)", "must be probe_timeline");
    Timeline t;
    t.source = "measured";
    const json &frames = requireField(j, "frames", ctx);
    if (!frames.is_array() || frames.size() > 65535)
        throw InputError(ctx + ".frames", show(frames), "must be an array of at most 65535 strings");
    for (const auto &f : frames) {
        if (!f.is_string())
            throw InputError(ctx + ".frames", show(f), "must be strings");
        t.ops.push_back(f.get<std::string>().substr(0, 300));
    }
    const json &events = requireField(j, "events", ctx);
    if (!events.is_array() || events.size() > (size_t(1) << 26))
        throw InputError(ctx + ".events", show(events), "must be an array of at most 2^26 events");
    t.events.reserve(events.size());
    std::vector<size_t> fileToOurs(events.size() + 1, 0);
    // What is alive at once, by id: the replay's totals stay far inside int64 (issue 32, row 11:
    // 200 allocations of 2^56 bytes, each within its limit, wrapped the total and drew nothing).
    std::unordered_map<uint32_t, int64_t> liveById;
    int64_t live = 0;
    constexpr int64_t kMaxLive = int64_t(1) << 60;
    for (size_t i = 0; i < events.size(); ++i) {
        const json &e = events[i];
        const std::string ec = ctx + ".events[" + std::to_string(i) + "]";
        if (!e.is_array() || e.empty() || !e[0].is_number_integer())
            throw InputError(ec, show(e), "must be [kind, ...]");
        const int64_t kind = e[0].get<int64_t>(); // compared whole: 2^32 is not 0
        auto num = [&](size_t k, int64_t lo, int64_t hi) {
            if (e.size() <= k || !e[k].is_number_integer() || e[k].get<int64_t>() < lo || e[k].get<int64_t>() > hi)
                throw InputError(ec, show(e), "field " + std::to_string(k) + " must be a whole number in range");
            return e[k].get<int64_t>();
        };
        fileToOurs[i] = t.events.size();
        if (kind == 0 || kind == 1) {
            MemEvent m;
            m.kind = kind == 0 ? MemEvent::Alloc : MemEvent::Free;
            m.id = static_cast<uint32_t>(num(1, 0, 0x7FFFFFFF));
            m.bytes = num(2, 0, kMaxBytes);
            if (kind == 0) {
                if (live > kMaxLive - m.bytes)
                    throw InputError(ec, show(e), "makes more than 2^60 bytes alive at once");
                if (auto [it, fresh] = liveById.emplace(m.id, m.bytes); fresh)
                    live += m.bytes;
            } else if (auto it = liveById.find(m.id); it != liveById.end()) {
                live -= it->second;
                liveById.erase(it);
            }
            if (kind == 0) {
                m.category = kAllCategories[static_cast<size_t>(num(3, 0, kCategoryCount - 1))];
                const int64_t fr = num(4, -1, static_cast<int64_t>(t.ops.size()) - 1);
                m.op = static_cast<uint16_t>(fr < 0 ? 0 : fr);
                // [0, id, size, category, frame, addr, stream]: the stream only when not the default
                if (e.size() > 6)
                    m.stream = static_cast<uint8_t>(num(6, 0, 255));
            }
            t.events.push_back(m);
        } else if (kind == 3) {
            // Segment frees come only from releasing the cache (empty_cache(), an OOM retry, the
            // garbage-collection threshold): one EmptyCache for a run of them.
            if (t.events.empty() || t.events.back().kind != MemEvent::EmptyCache) {
                MemEvent m;
                m.kind = MemEvent::EmptyCache;
                t.events.push_back(m);
            }
        } else if (kind == 2) {
            // [2, -1, bytes, -1, address, ...]: where the real cudaMalloc put a segment. The model
            // recomputes when segments are needed; it takes their addresses from here.
            if (e.size() > 4)
                t.segments.push_back({num(4, 0, INT64_MAX), num(2, 0, kMaxBytes)});
        } else {
            throw InputError(ec, show(e), "kind must be 0 (alloc), 1 (free), 2 or 3 (segments)");
        }
    }
    // Marks arrive with event indices into the file's list (segments included): fileToOurs.
    fileToOurs[events.size()] = t.events.size();
    const json &marks = requireField(j, "marks", ctx);
    if (!marks.is_array() || marks.size() > 100000)
        throw InputError(ctx + ".marks", show(marks), "must be an array");
    // The recorder places marks by time, and the allocator's clock and Python's can disagree by a
    // few events. Each mark also says how many bytes the allocator held then, so the stream is
    // replayed through the allocator model (whose count equals PyTorch's, block for block) and
    // each mark moves to the nearest event where the counts agree.
    t.startupBytes = j.contains("startup_bytes") ? requireInt64(j, "startup_bytes", ctx, 0, kMaxBytes)
                                                 : kTorchStartupBytes;
    std::vector<int64_t> held; // allocator's allocated bytes after each of our events
    {
        CachingAllocatorModel model;
        uint32_t startupId = 0;
        for (const auto &e : t.events)
            startupId = std::max(startupId, e.id + 1);
        model.malloc(startupId, t.startupBytes);
        held.reserve(t.events.size() + 1);
        held.push_back(model.allocatedBytes());
        for (const auto &e : t.events) {
            if (e.kind == MemEvent::Alloc)
                model.malloc(e.id, e.bytes, e.stream);
            else if (e.kind == MemEvent::Free)
                model.free(e.id);
            held.push_back(model.allocatedBytes());
        }
    }
    for (size_t i = 0; i < marks.size(); ++i) {
        const json &mk = marks[i];
        const std::string mc = ctx + ".marks[" + std::to_string(i) + "]";
        const json &ph = requireField(mk, "phase", mc);
        if (!ph.is_string())
            throw InputError(mc + ".phase", show(ph), "must be a string");
        const int64_t ev = requireInt64(mk, "event", mc, 0, static_cast<int64_t>(events.size()));
        size_t ours = fileToOurs[static_cast<size_t>(ev)];
        if (mk.contains("allocated_bytes") && mk.at("allocated_bytes").is_number_integer()) {
            const int64_t want = mk.at("allocated_bytes").get<int64_t>();
            const size_t window = 4096;
            for (size_t d = 0; d <= window; ++d) {
                if (ours >= d && held[ours - d] == want) {
                    ours -= d;
                    break;
                }
                if (ours + d < held.size() && held[ours + d] == want) {
                    ours += d;
                    break;
                }
            }
        }
        if (ph.get<std::string>() == "end")
            continue;
        TimelineMark m;
        m.phase = parsePhase(ph.get<std::string>(), mc + ".phase");
        m.step = static_cast<int>(requireInt64(mk, "step", mc, 0, 1000));
        if (mk.contains("micro_batch"))
            m.microBatch = static_cast<int>(requireInt64(mk, "micro_batch", mc, 0, 1 << 20));
        m.event = ours;
        t.marks.push_back(m);
    }
    if (j.contains("step"))
        t.steadyStep = static_cast<int>(requireInt64(j, "step", ctx, 0, 1000));
    return t;
}

Timeline readTimelineFile(const std::string &path)
{
    return timelineFromJson(readJsonFile(path, "timeline", 256u << 20));
}

json toJson(const Timeline &t)
{
    json events = json::array();
    for (const auto &e : t.events) {
        if (e.kind == MemEvent::Alloc && e.stream != 0) // the address is not modelled: 0
            events.push_back({0, e.id, e.bytes, static_cast<int>(e.category), e.op, 0, e.stream});
        else if (e.kind == MemEvent::Alloc)
            events.push_back({0, e.id, e.bytes, static_cast<int>(e.category), e.op});
        else if (e.kind == MemEvent::Free)
            events.push_back({1, e.id, e.bytes});
        else
            events.push_back({3, 0}); // a release of the cache: a segment free in the recorded form
    }
    // A recorded run's segments, in the recorded form [2, -1, bytes, -1, address], after the events
    // (only their order among themselves matters to the replay; marks index the events before them).
    for (const auto &[address, bytes] : t.segments)
        events.push_back({2, -1, bytes, -1, address});
    json marks = json::array();
    for (const auto &m : t.marks)
        marks.push_back({{"step", m.step}, {"phase", toString(m.phase)}, {"micro_batch", m.microBatch}, {"event", m.event}});
    // The categories by number; the reference model's only where an event has it (writesCategory).
    bool reference = false;
    for (const MemEvent &e : t.events)
        reference = reference || e.category == Category::ReferenceModel;
    json cats = json::array();
    for (Category c : kAllCategories)
        if (c != Category::ReferenceModel || reference)
            cats.push_back(toString(c));
    return {{"schema_version", kSchemaVersion}, {"kind", "probe_timeline"}, {"engine", t.source},
            {"frames", t.ops},  {"events", events}, {"marks", marks}, {"categories", cats},
            {"step", t.steadyStep}, {"startup_bytes", t.startupBytes}};
}

} // namespace headroom
