#include "headroom/measurement.h"

#include "headroom/error.h"
#include "headroom/serialize.h"

namespace headroom {

using nlohmann::json;

namespace {

std::string show(const json &v)
{
    return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string optString(const json &j, const char *key, const std::string &ctx)
{
    if (!j.contains(key) || j.at(key).is_null())
        return {};
    if (!j.at(key).is_string())
        throw InputError(ctx + "." + key, show(j.at(key)), "must be a string");
    return j.at(key).get<std::string>();
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

} // namespace

json toJson(const ProbeRequest &r)
{
    return {{"schema_version", kSchemaVersion},
            {"kind", "probe_request"},
            {"model", toJson(r.model)},
            {"config", toJson(r.config)},
            {"steps", r.steps},
            {"device", r.device}};
}

ProbeRequest probeRequestFromJson(const json &j)
{
    const std::string ctx = "request";
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    requireSchema(j, ctx);
    ProbeRequest r;
    r.model = modelArchFromJson(requireField(j, "model", ctx));
    r.config = trainingConfigFromJson(requireField(j, "config", ctx));
    if (j.contains("steps"))
        r.steps = static_cast<int>(requireInt64(j, "steps", ctx, 1, 1000));
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

json toJson(const Measurement &m)
{
    json phases = json::array();
    for (const auto &p : m.phases)
        phases.push_back({{"step", p.step},
                          {"phase", toString(p.phase)},
                          {"peak_allocated_bytes", p.peakAllocatedBytes},
                          {"peak_reserved_bytes", p.peakReservedBytes},
                          {"allocated_bytes", p.allocatedBytes},
                          {"reserved_bytes", p.reservedBytes},
                          {"device_used_bytes", p.deviceUsedBytes},
                          {"device_total_bytes", p.deviceTotalBytes},
                          {"alloc_retries", p.allocRetries},
                          {"ooms", p.ooms},
                          {"seconds", p.seconds}});
    json j = {{"schema_version", kSchemaVersion},
              {"event", "result"},
              {"device", m.device},
              {"device_name", m.deviceName},
              {"driver", m.driver},
              {"torch_version", m.torchVersion},
              {"headroom_version", m.headroomVersion},
              {"created_at", m.createdAt},
              {"model", toJson(m.model)},
              {"config", toJson(m.config)},
              {"warmup_steps", m.warmupSteps},
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
    m.deviceName = optString(j, "device_name", ctx);
    m.driver = optString(j, "driver", ctx);
    m.torchVersion = optString(j, "torch_version", ctx);
    m.headroomVersion = optString(j, "headroom_version", ctx);
    m.createdAt = optString(j, "created_at", ctx);
    m.model = modelArchFromJson(requireField(j, "model", ctx));
    m.config = trainingConfigFromJson(requireField(j, "config", ctx));
    if (j.contains("warmup_steps"))
        m.warmupSteps = static_cast<int>(requireInt64(j, "warmup_steps", ctx, 0, 1000));
    const json &phases = requireField(j, "phases", ctx);
    if (!phases.is_array())
        throw InputError(ctx + ".phases", show(phases).substr(0, 40), "must be an array");
    for (size_t i = 0; i < phases.size(); ++i) {
        const std::string pc = ctx + ".phases[" + std::to_string(i) + "]";
        const json &p = phases[i];
        PhaseMeasurement pm;
        pm.step = static_cast<int>(requireInt64(p, "step", pc, 0, 1000));
        const json &ph = requireField(p, "phase", pc);
        if (!ph.is_string())
            throw InputError(pc + ".phase", show(ph), "must be a string");
        pm.phase = parsePhase(ph.get<std::string>(), pc + ".phase");
        pm.peakAllocatedBytes = requireInt64(p, "peak_allocated_bytes", pc, 0, kMaxBytes);
        pm.peakReservedBytes = requireInt64(p, "peak_reserved_bytes", pc, 0, kMaxBytes);
        pm.allocatedBytes = requireInt64(p, "allocated_bytes", pc, 0, kMaxBytes);
        pm.reservedBytes = requireInt64(p, "reserved_bytes", pc, 0, kMaxBytes);
        if (p.contains("device_used_bytes"))
            pm.deviceUsedBytes = requireInt64(p, "device_used_bytes", pc, 0, kMaxBytes);
        if (p.contains("device_total_bytes"))
            pm.deviceTotalBytes = requireInt64(p, "device_total_bytes", pc, 0, kMaxBytes);
        if (p.contains("alloc_retries"))
            pm.allocRetries = requireInt64(p, "alloc_retries", pc, 0, kMaxBytes);
        if (p.contains("ooms"))
            pm.ooms = requireInt64(p, "ooms", pc, 0, kMaxBytes);
        pm.seconds = optNumber(p, "seconds", pc);
        if (pm.peakAllocatedBytes > pm.peakReservedBytes && pm.peakReservedBytes > 0)
            throw InputError(pc + ".peak_allocated_bytes", std::to_string(pm.peakAllocatedBytes),
                             "exceeds peak_reserved_bytes (" + std::to_string(pm.peakReservedBytes) + ")");
        m.phases.push_back(pm);
    }
    if (j.contains("attribution"))
        m.attribution = breakdownFromJson(j.at("attribution"), ctx + ".attribution");
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
        r.phase = parsePhase(requireField(o, "phase", ctx + ".oom").get<std::string>(), ctx + ".oom.phase");
        r.requestedBytes = requireInt64(o, "requested_bytes", ctx + ".oom", 0, kMaxBytes);
        r.inUseBytes = requireInt64(o, "in_use_bytes", ctx + ".oom", 0, kMaxBytes);
        r.message = optString(o, "message", ctx + ".oom");
        m.oom = r;
    }
    return m;
}

} // namespace headroom
