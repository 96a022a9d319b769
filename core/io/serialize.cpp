#include "headroom/serialize.h"

#include "headroom/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace headroom {

using nlohmann::json;

json toJson(const Breakdown &b)
{
    json j = json::object();
    for (Category c : kAllCategories)
        if (writesCategory(c, b[c]))
            j[std::string(toString(c))] = b[c];
    return j;
}

Breakdown breakdownFromJson(const json &j, const std::string &field)
{
    if (!j.is_object())
        throw InputError(field, showJson(j).substr(0, 40), "must be a JSON object of category: bytes");
    Breakdown b;
    for (const auto &[k, v] : j.items()) {
        const Category c = parseCategory(k, field);
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            throw InputError(field + "." + k, showJson(v), "must be a non-negative whole number of bytes");
        b[c] = v.get<int64_t>();
    }
    return b;
}

json toJson(const Estimate &e)
{
    json phases = json::array();
    for (const PhaseEstimate *pp : e.stepPhases()) {
        const PhaseEstimate &p = *pp;
        phases.push_back({{"phase", toString(p.phase)},
                          {"peak_allocated_bytes", p.peakAllocatedBytes},
                          {"peak_reserved_bytes", p.peakReservedBytes},
                          {"breakdown", toJson(p.atPeak)}});
        if (p.vision.total() > 0) // Note [Vision share]: of the breakdown, the tower's and projector's
            phases.back()["vision_breakdown"] = toJson(p.vision);
    }
    json doc = {{"tokens", e.tokens},
            {"parameters",
             {{"total", e.params.total},
              {"trainable", e.params.trainable},
              {"weight_bytes", e.params.weightBytes},
              {"gradient_bytes", e.params.gradientBytes},
              {"optimizer_state_bytes", e.params.optimizerStateBytes},
              {"paged_optimizer_state_bytes", e.params.pagedOptimizerStateBytes}}},
            {"peak",
             {{"phase", toString(e.peakPhase)},
              {"allocated_bytes", e.peakAllocatedBytes},
              {"reserved_bytes", e.peakReservedBytes},
              {"device_total_bytes", e.deviceTotalBytes}}},
            {"breakdown", toJson(e.peak)},
            {"phases", phases},
            {"notes", e.notes}};
    if (e.peakVision.total() > 0)
        doc["vision_breakdown"] = toJson(e.peakVision);
    return doc;
}

json toJson(const Verdict &v, const GpuSpec &gpu)
{
    return {{"gpu", gpu.id},
            {"gpu_name", gpu.name},
            {"status", toString(v.fit)},
            {"capacity_bytes", v.capacityBytes},
            {"usable_bytes", v.usableBytes},
            {"needed_bytes", v.neededBytes},
            {"reserve", v.reserve},
            {"headroom_bytes", v.headroomBytes()},
            {"headroom_fraction", v.headroomFraction()},
            {"cache_flushes", v.cacheFlushes}};
}

json toJson(const Recommendation &r)
{
    return {{"group", toString(r.group)},     {"id", r.id},
            {"title", r.title},               {"cost", r.cost},
            {"saving_bytes", r.savingBytes},  {"fits_after", r.fitsAfter},
            {"config", toJson(r.config)}};
}

json estimateDocument(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                      double reserve, const std::vector<Recommendation> &recs, const EstimatorOptions &opt,
                      const Room *room)
{
    json doc = toJson(e);
    doc["schema_version"] = kSchemaVersion;
    doc["model"] = {{"id", m.id}, {"name", m.name}, {"parameters", e.params.total}};
    doc["config"] = toJson(c);
    doc["verdict"] = toJson(judge(m, c, e, gpu, reserve, opt), gpu);
    doc["card_notes"] = cardNotes(m, c, e, gpu, reserve, opt, room);
    json r = json::array();
    for (const auto &rec : recs)
        r.push_back(toJson(rec));
    doc["recommendations"] = r;
    return doc;
}

} // namespace headroom
