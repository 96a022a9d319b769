// Issue 31: two configurations side by side, for a team's review. The changes from the pinned one
// to the current one are read off the sheet's own JSON of each, so every setting a sheet stores is
// compared and none is listed by hand.
#include "headroom/config_json.h"
#include "headroom/sheet.h"

#include "sheet_table.h"


namespace headroom {

using nlohmann::json;

namespace {

std::string shown(const json &v)
{
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_array()) {
        std::string out;
        for (const auto &e : v)
            out += (out.empty() ? "" : ", ") + shown(e);
        return out.empty() ? "(none)" : out;
    }
    if (v.is_null())
        return "(none)";
    return v.dump();
}

// Leaves of `a` and `b` under `prefix`, in `a`'s key order then `b`'s new keys, where they differ.
void diffJson(const json &a, const json &b, const std::string &prefix, std::vector<ScenarioChange> &out)
{
    if (a.is_object() && b.is_object()) {
        for (const auto &[k, va] : a.items())
            diffJson(va, b.contains(k) ? b.at(k) : json(), prefix.empty() ? k : prefix + "." + k, out);
        for (const auto &[k, vb] : b.items())
            if (!a.contains(k))
                diffJson(json(), vb, prefix.empty() ? k : prefix + "." + k, out);
        return;
    }
    if (a != b)
        out.push_back({prefix, shown(a), shown(b)});
}

bool usesLora(const TrainingConfig &c)
{
    return c.finetune != FineTune::Full;
}

std::string modelName(const ModelArch &m)
{
    return m.name + " (" + m.id + ")";
}

std::string gpuName(const GpuSpec &g)
{
    return g.name + " (" + formatBytes(g.memoryBytes, Unit::GiB, 1) + ")";
}

} // namespace

std::vector<ScenarioChange> diffScenarios(const Scenario &pinned, const Scenario &current)
{
    std::vector<ScenarioChange> out;
    const json ma = toJson(pinned.model), mb = toJson(current.model);
    if (pinned.model.id != current.model.id || pinned.model.name != current.model.name)
        out.push_back({"model", modelName(pinned.model), modelName(current.model)});
    else if (ma != mb) // one model edited: its fields
        diffJson(ma, mb, "model", out);
    json ca = toJson(pinned.config, true), cb = toJson(current.config, true);
    if (!usesLora(pinned.config) && !usesLora(current.config)) {
        ca.erase("lora");
        cb.erase("lora");
    }
    diffJson(ca, cb, "", out);
    if (pinned.gpu.id != current.gpu.id || pinned.gpu.memoryBytes != current.gpu.memoryBytes)
        out.push_back({"gpu", gpuName(pinned.gpu), gpuName(current.gpu)});
    if (pinned.reserve != current.reserve)
        out.push_back({"reserve", std::to_string(std::lround(pinned.reserve * 100)) + "%",
                       std::to_string(std::lround(current.reserve * 100)) + "%"});
    if (pinned.allocConf != current.allocConf)
        out.push_back({"alloc_conf", pinned.allocConf.empty() ? "defaults" : pinned.allocConf,
                       current.allocConf.empty() ? "defaults" : current.allocConf});
    return out;
}

std::vector<ComparedAmount> compareReports(const Report &pr, const Report &cr)
{
    std::vector<ComparedAmount> out;
    for (Category cat : kDisplayCategories)
        if (writesCategory(cat, pr.estimate.peak[cat] + cr.estimate.peak[cat]))
            out.push_back({std::string(label(cat)), pr.estimate.peak[cat], cr.estimate.peak[cat]});
    out.push_back({"Peak allocated", pr.estimate.peakAllocatedBytes, cr.estimate.peakAllocatedBytes});
    out.push_back({"Peak reserved", pr.estimate.peakReservedBytes, cr.estimate.peakReservedBytes});
    out.push_back({"Device total", pr.estimate.deviceTotalBytes, cr.estimate.deviceTotalBytes});
    out.push_back({"Headroom on its card", pr.verdict.headroomBytes(), cr.verdict.headroomBytes()});
    return out;
}

std::string signedBytes(int64_t d, Unit u)
{
    if (d == 0)
        return "0";
    return (d > 0 ? "+" : "-") + formatBytes(d > 0 ? d : -d, u, 2);
}

std::vector<sheetparts::Table> sheetparts::comparisonTables(const Scenario &pinned, const Report &pr,
                                                            const Scenario &current, const Report &cr, Unit u)
{
    const auto fmt = [&](int64_t b) { return formatBytes(b, u, 2); };
    std::vector<Table> t;
    Table verdicts{"Compared with the pinned configuration", {"", "Configuration", "Verdict"}, {}};
    verdicts.rows.push_back({"Pinned", pinned.model.name + ", " + summarize(pinned.config), verdictLine(pr, u)});
    verdicts.rows.push_back({"Current", current.model.name + ", " + summarize(current.config), verdictLine(cr, u)});
    t.push_back(verdicts);

    Table changes{"What changed", {"Setting", "Pinned", "Current"}, {}};
    for (const auto &c : diffScenarios(pinned, current))
        changes.rows.push_back({c.setting, c.pinned, c.current});
    if (changes.rows.empty())
        changes.rows.push_back({"(nothing)", "-", "-"});
    t.push_back(changes);

    Table bd{"Breakdown compared (each at its own peak)", {"Category", "Pinned", "Current", "Difference"}, {}};
    for (const auto &a : compareReports(pr, cr))
        bd.rows.push_back({a.name, fmt(a.pinned), fmt(a.current), signedBytes(a.current - a.pinned, u)});
    t.push_back(bd);
    return t;
}

} // namespace headroom
