#include "headroom/measurement.h"

#include "headroom/error.h"
#include "headroom/serialize.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace headroom {

double relativeError(int64_t estimated, int64_t measured)
{
    return measured > 0 ? static_cast<double>(estimated - measured) / static_cast<double>(measured) : 0.0;
}


using nlohmann::json;

namespace {

std::string show(const json &v) { return showJson(v); }
std::string optString(const json &j, const char *key, const std::string &ctx)
{
    if (!j.contains(key) || j.at(key).is_null())
        return {};
    if (!j.at(key).is_string())
        throw InputError(ctx + "." + key, show(j.at(key)), "must be a string");
    return boundedName(j.at(key).get<std::string>(), 2000); // device names, notes: shown as they are
}

double optNumber(const json &j, const char *key, const std::string &ctx)
{
    if (!j.contains(key) || j.at(key).is_null())
        return 0.0;
    if (!j.at(key).is_number() || j.at(key).get<double>() < 0)
        throw InputError(ctx + "." + key, show(j.at(key)), "must be a non-negative number");
    return j.at(key).get<double>();
}

constexpr int64_t kMaxBytes = int64_t(1) << 56; // 64 PiB: anything larger is garbage

// A required phase name, e.g. "result.phases[3].phase".
Phase requirePhase(const json &obj, const char *key, const std::string &ctx)
{
    const json &v = requireField(obj, key, ctx);
    if (!v.is_string())
        throw InputError(ctx + "." + key, show(v), "must be a string");
    return parsePhase(v.get<std::string>(), ctx + "." + key);
}

} // namespace

json toJson(const ProbeRequest &r)
{
    // With its config.json the model travels as a preset ({"headroom", "config"}), which both
    // engines read; the transformers engine builds that config as it is.
    json model = toJson(r.model);
    if (!r.model.hfConfig.is_null())
        model = {{"headroom", {{"id", r.model.id}, {"name", r.model.name}, {"published_params", r.model.publishedParams}}},
                 {"config", r.model.hfConfig}};
    // Issue 30: a vision-language checkpoint is built whole, with the checkpoint processor's pixel
    // bounds for the engine's token count (vision.py), images or not
    json config = toJson(r.config);
    if (familyTraitsOrLlama(r.model.modelType).visionLanguage && r.model.vision.present()) {
        json v = visionJson(r.config.vision);
        v["processor_min_pixels"] = r.model.vision.minPixels;
        v["processor_max_pixels"] = r.model.vision.maxPixels;
        v["video_processor_min_pixels"] = r.model.vision.videoMinPixels;
        v["video_processor_max_pixels"] = r.model.vision.videoMaxPixels;
        config["vision"] = v;
    }
    return {{"schema_version", kSchemaVersion},
            {"kind", "probe_request"},
            {"model", model},
            {"config", config},
            {"steps", r.steps},
            {"early_stop", r.earlyStop},
            {"device", r.device},
            {"engine", r.engine}};
}

ProbeRequest probeRequestFromJson(const json &j)
{
    const std::string ctx = "request";
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    requireSchema(j, ctx);
    ProbeRequest r;
    r.model = modelArchFromJsonLenient(requireField(j, "model", ctx));
    r.config = trainingConfigFromJson(requireField(j, "config", ctx));
    if (j.contains("engine")) {
        r.engine = optString(j, "engine", ctx);
        if (r.engine != "libtorch" && r.engine != "transformers")
            throw InputError(ctx + ".engine", r.engine, "must be libtorch or transformers");
    }
    if (j.contains("steps"))
        r.steps = static_cast<int>(requireInt64(j, "steps", ctx, 1, 1000));
    if (j.contains("early_stop")) {
        if (!j.at("early_stop").is_boolean())
            throw InputError(ctx + ".early_stop", show(j.at("early_stop")), "must be true or false");
        r.earlyStop = j.at("early_stop").get<bool>();
    }
    if (j.contains("device")) {
        r.device = optString(j, "device", ctx);
        if (r.device != "auto" && r.device != "cuda" && r.device != "cpu")
            throw InputError(ctx + ".device", r.device, "must be auto, cuda or cpu");
    }
    return r;
}

std::optional<PhaseMeasurement> Measurement::steady(Phase p) const
{
    std::optional<PhaseMeasurement> best;
    for (const auto &m : phases) {
        // after_load happens once, before the warm-up step; every other phase is steady after it.
        if (m.phase != p || (p != Phase::AfterLoad && m.step < warmupSteps))
            continue;
        if (!best || m.peakAllocatedBytes > best->peakAllocatedBytes)
            best = m;
    }
    return best;
}

void settleSteadyPeak(Measurement &m)
{
    for (Phase p : kStepPhases) {
        auto sp = m.steady(p);
        if (sp && sp->peakAllocatedBytes >= m.peakAllocatedBytes) {
            m.peakAllocatedBytes = sp->peakAllocatedBytes;
            m.peakPhase = p;
        }
        if (sp)
            m.peakReservedBytes = std::max(m.peakReservedBytes, sp->peakReservedBytes);
    }
}

Breakdown attributePeak(const PeakAccounts &a, int64_t peak, Phase peakPhase)
{
    Breakdown A;
    A[Category::Weights] = a.weightBytes;
    A[Category::Communication] = a.communicationBytes; // DDP's Reducer buckets, resident
    A[Category::OptimizerState] = a.optimizerStateBytes;
    const int64_t acts = std::max<int64_t>(0, a.keptAfterForwardBytes - a.logprobBytes);
    if (peakPhase == Phase::Optimizer) {
        A[Category::Gradients] = a.gradientBytes;
    } else if (peakPhase == Phase::Backward && peak - a.residentBytes <= a.gradientBytes + acts / 4) {
        A[Category::Gradients] = a.gradientBytes; // the peak came at the end of backward
    } else {
        A[Category::Activations] = acts;
        A[Category::Logits] = std::max<int64_t>(0, peak - a.residentBytes - acts);
    }
    int64_t named = 0;
    for (Category cat : {Category::Weights, Category::OptimizerState, Category::Gradients, Category::Activations,
                         Category::Logits, Category::Communication})
        named += A[cat];
    A[Category::Temporaries] = std::max<int64_t>(0, peak - named);
    return A;
}

void attributePhases(Measurement &m, const PeakAccounts &a)
{
    for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer})
        if (const auto sp = m.steady(p))
            m.phaseAttribution[static_cast<size_t>(p)] = attributePeak(a, sp->peakAllocatedBytes, p);
}

double rankSpread(const Measurement &m)
{
    if (m.ranks.size() < 2)
        return 1.0;
    int64_t lo = m.ranks.front().peakAllocatedBytes, hi = lo;
    for (const auto &r : m.ranks) {
        lo = std::min(lo, r.peakAllocatedBytes);
        hi = std::max(hi, r.peakAllocatedBytes);
    }
    return lo > 0 ? static_cast<double>(hi) / static_cast<double>(lo) : 0.0;
}

RankPeak rankPeak(const Measurement &m, int rank)
{
    RankPeak r;
    r.rank = rank;
    r.deviceName = m.deviceName;
    for (Phase p : kStepOrder)
        if (auto sp = m.steady(p))
            r.phases.push_back(*sp);
    r.peakAllocatedBytes = m.peakAllocatedBytes;
    r.peakReservedBytes = m.peakReservedBytes;
    r.deviceTotalBytes = m.deviceTotalBytes();
    r.peakPhase = m.peakPhase;
    r.oom = m.oom.has_value();
    if (r.oom) { // the phase that failed and what it held when it did
        r.peakPhase = m.oom->phase;
        r.peakAllocatedBytes = std::max(r.peakAllocatedBytes, m.oom->inUseBytes);
    }
    return r;
}

Measurement mergeRanks(std::vector<Measurement> perRank)
{
    if (perRank.empty())
        throw InputError("ranks", "[]", "no rank reported a result");
    std::vector<RankPeak> all;
    for (size_t i = 0; i < perRank.size(); ++i) {
        const auto &m = perRank[i];
        const std::string ctx = "ranks[" + std::to_string(i) + "]";
        if (m.ranks.size() != 1)
            throw InputError(ctx + ".ranks", std::to_string(m.ranks.size()) + " entries",
                             "a rank's own result lists exactly itself");
        if (toJson(m.config) != toJson(perRank.front().config))
            throw InputError(ctx + ".config", toJson(m.config).dump().substr(0, 60),
                             "differs from rank " + std::to_string(perRank.front().ranks.front().rank) + "'s");
        all.push_back(m.ranks.front());
    }
    std::sort(all.begin(), all.end(), [](const RankPeak &a, const RankPeak &b) { return a.rank < b.rank; });
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i].rank != static_cast<int>(i))
            throw InputError("ranks[" + std::to_string(i) + "].rank", std::to_string(all[i].rank),
                             "ranks must be 0.." + std::to_string(all.size() - 1) + ", each once");
    // The card that decides: an out-of-memory rank first, then the highest peak.
    auto worst = std::max_element(perRank.begin(), perRank.end(), [](const Measurement &a, const Measurement &b) {
        const RankPeak &ra = a.ranks.front(), &rb = b.ranks.front();
        if (ra.oom != rb.oom)
            return rb.oom;
        return ra.peakAllocatedBytes < rb.peakAllocatedBytes;
    });
    Measurement out = std::move(*worst);
    out.ranks = std::move(all);
    return out;
}

std::string engineProvenance(const Measurement &m)
{
    if (m.engine != "transformers")
        return "libtorch engine (LibTorch " + (m.torchVersion.empty() ? std::string("?") : m.torchVersion) + ")";
    std::string parts;
    auto add = [&](const char *key, const char *label) {
        if (m.engineInfo.contains(key) && m.engineInfo.at(key).is_string())
            parts += (parts.empty() ? "" : ", ") + std::string(label) + " " + m.engineInfo.at(key).get<std::string>();
    };
    add("transformers", "Transformers");
    add("peft", "PEFT");
    add("bitsandbytes", "bitsandbytes");
    parts += (parts.empty() ? "" : ", ") + std::string("PyTorch ") + m.torchVersion;
    return "transformers engine (" + parts + ")";
}

json toJson(const Measurement &m)
{
    json phases = json::array();
    for (const auto &p : m.phases) {
        phases.push_back({{"step", p.step},
                          {"phase", toString(p.phase)},
                          {"micro_batch", p.microBatch},
                          {"peak_allocated_bytes", p.peakAllocatedBytes},
                          {"peak_reserved_bytes", p.peakReservedBytes},
                          {"allocated_bytes", p.allocatedBytes},
                          {"reserved_bytes", p.reservedBytes},
                          {"device_used_bytes", p.deviceUsedBytes},
                          {"device_total_bytes", p.deviceTotalBytes},
                          {"process_used_bytes", p.processUsedBytes},
                          {"alloc_retries", p.allocRetries},
                          {"ooms", p.ooms},
                          {"seconds", p.seconds}});
        if (p.replayed)
            phases.back()["replayed"] = true;
    }
    json j = {{"schema_version", kSchemaVersion},
              {"event", "result"},
              {"engine", m.engine},
              {"device", m.device},
              {"device_name", m.deviceName},
              {"driver", m.driver},
              {"torch_version", m.torchVersion},
              {"headroom_version", m.headroomVersion},
              {"created_at", m.createdAt},
              {"model", toJson(m.model)},
              {"config", toJson(m.config)},
              {"warmup_steps", m.warmupSteps},
              {"skipped_steps", m.skippedSteps},
              {"phases", phases},
              {"attribution", toJson(m.attribution)},
              {"peak", {{"phase", toString(m.peakPhase)},
                        {"allocated_bytes", m.peakAllocatedBytes},
                        {"reserved_bytes", m.peakReservedBytes},
                        {"cuda_context_bytes", m.cudaContextBytes},
                        {"device_total_bytes", m.deviceTotalBytes()}}},
              {"timing", {{"wall_s", m.wallSeconds}, {"init_s", m.initSeconds}, {"build_s", m.buildSeconds},
                          {"steps_s", m.stepsSeconds}}},
              {"note", m.note}};
    json byPhase = json::object();
    for (Phase p : kStepOrder)
        if (const auto &b = m.phaseAttribution[static_cast<size_t>(p)])
            byPhase[std::string(toString(p))] = toJson(*b);
    if (!byPhase.empty())
        j["phase_attribution"] = byPhase;
    if (!m.engineInfo.empty())
        j["engine_info"] = m.engineInfo;
    if (m.sharedDevice)
        j["shared_device"] = true;
    if (!m.backend.empty())
        j["backend"] = m.backend;
    if (!m.ranks.empty()) {
        json ranks = json::array();
        for (const auto &r : m.ranks) {
            json phases = json::array();
            for (const auto &p : r.phases)
                phases.push_back({{"phase", toString(p.phase)},
                                  {"step", p.step},
                                  {"peak_allocated_bytes", p.peakAllocatedBytes},
                                  {"peak_reserved_bytes", p.peakReservedBytes},
                                  {"device_used_bytes", p.deviceUsedBytes}});
            ranks.push_back({{"rank", r.rank},
                             {"device_name", r.deviceName},
                             {"peak_phase", toString(r.peakPhase)},
                             {"peak_allocated_bytes", r.peakAllocatedBytes},
                             {"peak_reserved_bytes", r.peakReservedBytes},
                             {"device_total_bytes", r.deviceTotalBytes},
                             {"parameters_sum", r.parametersSum},
                             {"oom", r.oom},
                             {"phases", phases}});
        }
        const double spread = rankSpread(m);
        j["ranks"] = ranks;
        j["spread"] = spread;
        j["uneven"] = spread > kUnevenSpread;
    }
    if (m.oom)
        j["oom"] = {{"step", m.oom->step},
                    {"phase", toString(m.oom->phase)},
                    {"requested_bytes", m.oom->requestedBytes},
                    {"in_use_bytes", m.oom->inUseBytes},
                    {"message", m.oom->message}};
    else
        j["oom"] = nullptr;
    return j;
}

Measurement measurementFromJson(const json &j)
{
    const std::string ctx = "result";
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    requireSchema(j, ctx);
    Measurement m;
    m.device = optString(j, "device", ctx);
    if (m.device != "cuda" && m.device != "cpu")
        throw InputError(ctx + ".device", m.device.empty() ? "(missing)" : m.device, "must be cuda or cpu");
    m.deviceName = boundedName(optString(j, "device_name", ctx));
    m.driver = optString(j, "driver", ctx);
    m.torchVersion = optString(j, "torch_version", ctx);
    m.headroomVersion = optString(j, "headroom_version", ctx);
    m.createdAt = optString(j, "created_at", ctx);
    if (j.contains("engine")) {
        m.engine = optString(j, "engine", ctx);
        if (m.engine != "libtorch" && m.engine != "transformers")
            throw InputError(ctx + ".engine", m.engine.substr(0, 40), "must be libtorch or transformers");
    }
    if (j.contains("engine_info") && !j.at("engine_info").is_null()) {
        const json &ei = j.at("engine_info");
        if (!ei.is_object() || ei.size() > 64 || ei.dump().size() > 16384)
            throw InputError(ctx + ".engine_info", show(ei).substr(0, 40), "must be an object of at most 16 KiB");
        m.engineInfo = ei;
    }
    if (j.contains("shared_device")) {
        if (!j.at("shared_device").is_boolean())
            throw InputError(ctx + ".shared_device", show(j.at("shared_device")), "must be true or false");
        m.sharedDevice = j.at("shared_device").get<bool>();
    }
    m.model = modelArchFromJsonLenient(requireField(j, "model", ctx));
    m.config = trainingConfigFromJson(requireField(j, "config", ctx));
    if (j.contains("warmup_steps"))
        m.warmupSteps = static_cast<int>(requireInt64(j, "warmup_steps", ctx, 0, 1000));
    if (j.contains("skipped_steps"))
        m.skippedSteps = static_cast<int>(requireInt64(j, "skipped_steps", ctx, 0, 1000));
    const json &phases = requireField(j, "phases", ctx);
    if (!phases.is_array())
        throw InputError(ctx + ".phases", show(phases).substr(0, 40), "must be an array");
    for (size_t i = 0; i < phases.size(); ++i) {
        const std::string pc = ctx + ".phases[" + std::to_string(i) + "]";
        const json &p = phases[i];
        PhaseMeasurement pm;
        pm.step = static_cast<int>(requireInt64(p, "step", pc, 0, 1000));
        pm.phase = requirePhase(p, "phase", pc);
        if (p.contains("micro_batch"))
            pm.microBatch = static_cast<int>(requireInt64(p, "micro_batch", pc, 0, 1 << 20));
        pm.peakAllocatedBytes = requireInt64(p, "peak_allocated_bytes", pc, 0, kMaxBytes);
        pm.peakReservedBytes = requireInt64(p, "peak_reserved_bytes", pc, 0, kMaxBytes);
        pm.allocatedBytes = requireInt64(p, "allocated_bytes", pc, 0, kMaxBytes);
        pm.reservedBytes = requireInt64(p, "reserved_bytes", pc, 0, kMaxBytes);
        if (p.contains("device_used_bytes"))
            pm.deviceUsedBytes = requireInt64(p, "device_used_bytes", pc, 0, kMaxBytes);
        if (p.contains("device_total_bytes"))
            pm.deviceTotalBytes = requireInt64(p, "device_total_bytes", pc, 0, kMaxBytes);
        if (p.contains("process_used_bytes"))
            pm.processUsedBytes = requireInt64(p, "process_used_bytes", pc, 0, kMaxBytes);
        if (p.contains("alloc_retries"))
            pm.allocRetries = requireInt64(p, "alloc_retries", pc, 0, kMaxBytes);
        if (p.contains("ooms"))
            pm.ooms = requireInt64(p, "ooms", pc, 0, kMaxBytes);
        pm.seconds = optNumber(p, "seconds", pc);
        if (p.contains("replayed")) {
            if (!p.at("replayed").is_boolean())
                throw InputError(pc + ".replayed", show(p.at("replayed")), "must be true or false");
            pm.replayed = p.at("replayed").get<bool>();
        }
        if (pm.peakAllocatedBytes > pm.peakReservedBytes && pm.peakReservedBytes > 0)
            throw InputError(pc + ".peak_allocated_bytes", std::to_string(pm.peakAllocatedBytes),
                             "exceeds peak_reserved_bytes (" + std::to_string(pm.peakReservedBytes) + ")");
        m.phases.push_back(pm);
    }
    if (j.contains("attribution"))
        m.attribution = breakdownFromJson(j.at("attribution"), ctx + ".attribution");
    if (j.contains("phase_attribution")) {
        const json &pa = j.at("phase_attribution");
        const std::string pctx = ctx + ".phase_attribution";
        if (!pa.is_object())
            throw InputError(pctx, showJson(pa, 60), "must be an object of phase -> bytes by category");
        for (auto it = pa.begin(); it != pa.end(); ++it) {
            const Phase p = parsePhase(it.key(), pctx);
            if (p == Phase::AfterLoad)
                throw InputError(pctx, it.key(), "after_load has no attribution (forward, backward or optimizer)");
            m.phaseAttribution[static_cast<size_t>(p)] = breakdownFromJson(it.value(), pctx + "." + it.key());
        }
    }
    const json &peak = requireField(j, "peak", ctx);
    m.peakAllocatedBytes = requireInt64(peak, "allocated_bytes", ctx + ".peak", 0, kMaxBytes);
    m.peakReservedBytes = requireInt64(peak, "reserved_bytes", ctx + ".peak", 0, kMaxBytes);
    if (peak.contains("cuda_context_bytes"))
        m.cudaContextBytes = requireInt64(peak, "cuda_context_bytes", ctx + ".peak", 0, kMaxBytes);
    if (peak.contains("phase") && peak.at("phase").is_string())
        m.peakPhase = parsePhase(peak.at("phase").get<std::string>(), ctx + ".peak.phase");
    if (j.contains("timing") && j.at("timing").is_object()) {
        const json &t = j.at("timing");
        m.wallSeconds = optNumber(t, "wall_s", ctx + ".timing");
        m.initSeconds = optNumber(t, "init_s", ctx + ".timing");
        m.buildSeconds = optNumber(t, "build_s", ctx + ".timing");
        m.stepsSeconds = optNumber(t, "steps_s", ctx + ".timing");
    }
    m.note = optString(j, "note", ctx);
    if (j.contains("oom") && !j.at("oom").is_null()) {
        const json &o = j.at("oom");
        OomReport r;
        r.step = static_cast<int>(requireInt64(o, "step", ctx + ".oom", 0, 1000));
        r.phase = requirePhase(o, "phase", ctx + ".oom");
        r.requestedBytes = requireInt64(o, "requested_bytes", ctx + ".oom", 0, kMaxBytes);
        r.inUseBytes = requireInt64(o, "in_use_bytes", ctx + ".oom", 0, kMaxBytes);
        r.message = optString(o, "message", ctx + ".oom");
        m.oom = r;
    }
    if (j.contains("backend")) {
        m.backend = optString(j, "backend", ctx);
        if (m.backend != "gloo" && m.backend != "nccl")
            throw InputError(ctx + ".backend", m.backend, "must be gloo or nccl");
    }
    if (j.contains("ranks") && !j.at("ranks").is_null()) {
        const json &ranks = j.at("ranks");
        if (!ranks.is_array() || ranks.size() > (size_t(1) << 16))
            throw InputError(ctx + ".ranks", show(ranks).substr(0, 40), "must be an array of at most 65536 ranks");
        for (size_t i = 0; i < ranks.size(); ++i) {
            const std::string rc = ctx + ".ranks[" + std::to_string(i) + "]";
            const json &e = ranks[i];
            if (!e.is_object())
                throw InputError(rc, show(e).substr(0, 40), "must be an object");
            RankPeak r;
            r.rank = static_cast<int>(requireInt64(e, "rank", rc, 0, (1 << 16) - 1));
            r.deviceName = boundedName(optString(e, "device_name", rc));
            r.peakAllocatedBytes = requireInt64(e, "peak_allocated_bytes", rc, 0, kMaxBytes);
            r.peakReservedBytes = requireInt64(e, "peak_reserved_bytes", rc, 0, kMaxBytes);
            if (e.contains("device_total_bytes"))
                r.deviceTotalBytes = requireInt64(e, "device_total_bytes", rc, 0, kMaxBytes);
            r.peakPhase = requirePhase(e, "peak_phase", rc);
            if (e.contains("parameters_sum")) {
                if (!e.at("parameters_sum").is_number())
                    throw InputError(rc + ".parameters_sum", show(e.at("parameters_sum")), "must be a number");
                r.parametersSum = e.at("parameters_sum").get<double>();
            }
            if (e.contains("oom")) {
                if (!e.at("oom").is_boolean())
                    throw InputError(rc + ".oom", show(e.at("oom")), "must be true or false");
                r.oom = e.at("oom").get<bool>();
            }
            if (e.contains("phases")) {
                const json &ph = e.at("phases");
                if (!ph.is_array() || ph.size() > 16)
                    throw InputError(rc + ".phases", show(ph).substr(0, 40), "must be an array of at most 16 phases");
                for (size_t k = 0; k < ph.size(); ++k) {
                    const std::string pc = rc + ".phases[" + std::to_string(k) + "]";
                    PhaseMeasurement pm;
                    pm.phase = requirePhase(ph[k], "phase", pc);
                    pm.step = static_cast<int>(requireInt64(ph[k], "step", pc, 0, 1000));
                    pm.peakAllocatedBytes = requireInt64(ph[k], "peak_allocated_bytes", pc, 0, kMaxBytes);
                    pm.peakReservedBytes = requireInt64(ph[k], "peak_reserved_bytes", pc, 0, kMaxBytes);
                    if (ph[k].contains("device_used_bytes"))
                        pm.deviceUsedBytes = requireInt64(ph[k], "device_used_bytes", pc, 0, kMaxBytes);
                    r.phases.push_back(pm);
                }
            }
            if (!m.ranks.empty() && r.rank <= m.ranks.back().rank)
                throw InputError(rc + ".rank", std::to_string(r.rank), "ranks must be listed once each, in order");
            m.ranks.push_back(r);
        }
    }
    return m;
}

Timeline timelineFromTrace(const std::vector<AllocatorTraceEntry> &trace, std::vector<TimelineMark> marks)
{
    Timeline t;
    t.source = "measured";
    t.ops.push_back("caching allocator trace"); // the trace names no op
    t.events.reserve(trace.size());
    std::unordered_map<uint64_t, uint32_t> live; // address -> id
    uint32_t next = 0;
    size_t mark = 0;
    std::sort(marks.begin(), marks.end(), [](const TimelineMark &a, const TimelineMark &b) { return a.event < b.event; });
    for (size_t i = 0; i <= trace.size(); ++i) {
        for (; mark < marks.size() && marks[mark].event <= i; ++mark) {
            marks[mark].event = t.events.size();
            t.marks.push_back(marks[mark]);
        }
        if (i == trace.size())
            break;
        const AllocatorTraceEntry &e = trace[i];
        MemEvent ev;
        if (e.kind == AllocatorTraceEntry::Alloc) {
            ev.kind = MemEvent::Alloc;
            ev.id = next++;
            ev.bytes = e.bytes;
            live[e.address] = ev.id;
        } else if (e.kind == AllocatorTraceEntry::Free) {
            const auto it = live.find(e.address);
            if (it == live.end())
                continue;
            ev.kind = MemEvent::Free;
            ev.id = it->second;
            ev.bytes = e.bytes;
            live.erase(it);
        } else if (e.kind == AllocatorTraceEntry::SegmentAlloc) {
            t.segments.push_back({static_cast<int64_t>(e.address), e.bytes});
            continue;
        } else {
            if (!t.events.empty() && t.events.back().kind == MemEvent::EmptyCache)
                continue;
            ev.kind = MemEvent::EmptyCache;
        }
        t.events.push_back(ev);
    }
    return t;
}

std::optional<bool> nextStepRepeats(const Timeline &t, const AllocatorConfig &config,
                                    const std::vector<PhaseMeasurement> &measured, std::string *why)
{
    auto no = [why](const std::string &w) -> std::optional<bool> {
        if (why)
            *why = w;
        return std::nullopt;
    };
    if (t.marks.empty())
        return no("no phase marks");
    // One replay: the run so far, then its last step once more (the allocator is deterministic,
    // so the run's phases replay alike with or without the copy after them).
    Timeline next = t;
    if (!repeatLastStep(next))
        return no("the last step keeps tensors it allocated (not closed)");
    const int last = t.marks.back().step;
    const Replay r = replay(next, config);
    if (r.outOfMemory || r.retries > 0)
        return no("the replay ran out of memory or retried");
    std::map<std::tuple<int, Phase, int>, std::pair<int64_t, int64_t>> replayed; // (step, phase, micro) -> peaks
    for (const ReplayPhase &p : r.phases) {
        auto &v = replayed[{p.mark.step, p.mark.phase, p.mark.microBatch}];
        v.first = std::max(v.first, p.peakAllocatedBytes);
        v.second = std::max(v.second, p.peakReservedBytes);
    }
    int compared = 0;
    for (const PhaseMeasurement &m : measured) {
        if (m.phase == Phase::AfterLoad)
            continue;
        const auto it = replayed.find({m.step, m.phase, m.microBatch});
        if (it == replayed.end() || m.step > last)
            return no("step " + std::to_string(m.step) + " " + std::string(toString(m.phase)) + " is not in the trace");
        if (it->second.first != m.peakAllocatedBytes || it->second.second != m.peakReservedBytes)
            return no("step " + std::to_string(m.step) + " " + std::string(toString(m.phase)) + ": the model peaks at " +
                      std::to_string(it->second.first) + " allocated, " + std::to_string(it->second.second) +
                      " reserved; measured " + std::to_string(m.peakAllocatedBytes) + ", " +
                      std::to_string(m.peakReservedBytes));
        ++compared;
    }
    if (compared == 0)
        return no("nothing measured to check the model against");
    // The cache the last step ends with: the next step repeats it when each of its phases peaks at
    // the same allocated bytes and it reserves nothing more (a phase's peak reserved is then that).
    int64_t endReserved = -1;
    for (const ReplayPhase &p : r.phases)
        if (p.mark.step == last)
            endReserved = p.endReservedBytes;
    for (const auto &[k, v] : replayed) {
        if (std::get<0>(k) != last + 1)
            continue;
        const auto same = replayed.find({last, std::get<1>(k), std::get<2>(k)});
        if (same == replayed.end() || same->second.first != v.first || v.second != endReserved)
            return false;
    }
    return true;
}

std::vector<PhaseMeasurement> repeatedStep(const std::vector<PhaseMeasurement> &phases, int step, int as)
{
    int64_t endReserved = 0;
    for (const PhaseMeasurement &p : phases)
        if (p.step == step)
            endReserved = std::max(endReserved, p.reservedBytes);
    std::vector<PhaseMeasurement> out;
    for (const PhaseMeasurement &p : phases) {
        if (p.step != step || p.phase == Phase::AfterLoad)
            continue;
        PhaseMeasurement r = p;
        r.step = as;
        r.peakReservedBytes = endReserved; // the cache it starts with, which it does not grow
        r.reservedBytes = endReserved;
        r.seconds = 0.0;
        r.replayed = true;
        out.push_back(r);
    }
    return out;
}

} // namespace headroom
