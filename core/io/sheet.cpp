#include "headroom/sheet.h"

#include "headroom/traced.h"

#include "headroom/budget.h"
#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/json_input.h"
#include "headroom/serialize.h"

#include "sheet_table.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

namespace headroom {

using nlohmann::json;

std::string_view toString(Unit u)
{
    return u == Unit::GiB ? "GiB" : "GB";
}

Unit parseUnit(std::string_view s, const std::string &field)
{
    if (s == "GiB")
        return Unit::GiB;
    if (s == "GB")
        return Unit::GB;
    throw InputError(field, std::string(s), "must be GiB or GB");
}

double toUnit(int64_t bytes, Unit u)
{
    return static_cast<double>(bytes) / (u == Unit::GiB ? 1073741824.0 : 1e9);
}

std::string formatBytes(int64_t bytes, Unit u, int decimals)
{
    return u == Unit::GiB ? formatGiB(bytes, decimals) : formatScaled(bytes, decimals, 1e9, 1000.0, "GB", "TB");
}

bool Scenario::operator==(const Scenario &o) const
{
    return toJson(model) == toJson(o.model) && toJson(config) == toJson(o.config) && gpu.id == o.gpu.id &&
           gpu.memoryBytes == o.gpu.memoryBytes && reserve == o.reserve && allocConf == o.allocConf;
}

EstimatorOptions estimatorOptions(const Scenario &s)
{
    EstimatorOptions o;
    o.allocator = parseAllocConf(s.allocConf, "alloc_conf");
    return o;
}

Scenario defaultScenario()
{
    Scenario s;
    s.model = findModelPreset("llama-3.1-8b");
    s.config.finetune = FineTune::LoRA;
    s.config.lora.rank = 16;
    s.config.microBatch = 4;
    s.config.seqLen = 2048;
    s.config.precision = Precision::BF16;
    s.gpu = findGpu("h100-80");
    return s;
}

Report buildReport(const Scenario &s, bool withAdvice)
{
    Report r;
    r.scenario = s;
    try {
        const EstimatorOptions opt = estimatorOptions(s);
        r.estimate = estimate(s.model, s.config, opt);
        r.verdict = judge(s.model, s.config, r.estimate, s.gpu, s.reserve, opt);
        r.notes = r.estimate.notes;
        if (withAdvice) {
            const Room room(s.model, s.config, s.gpu, s.reserve, opt); // searched once for both
            r.recommendations = recommend(s.model, s.config, s.gpu, s.reserve, opt, &room);
            for (auto &n : cardNotes(s.model, s.config, r.estimate, s.gpu, s.reserve, opt, &room))
                r.notes.push_back(std::move(n));
        }
        // The sheet's "verdict by card": every card of the catalog, the chosen one included if it
        // is the user's own (the full pass only: the slider's quick pass does not show it).
        if (withAdvice) {
            for (const GpuSpec &g : gpuCatalog())
                r.otherCards.emplace_back(g, judge(s.model, s.config, r.estimate, g, s.reserve, opt));
            if (std::none_of(gpuCatalog().begin(), gpuCatalog().end(), [&](const GpuSpec &g) { return g.id == s.gpu.id; }))
                r.otherCards.emplace_back(s.gpu, r.verdict);
        }
    } catch (const InputError &e) {
        r.error = e.what();
        try {
            r.fix = quickFix(s.model, s.config, e, estimatorOptions(s));
        } catch (const InputError &) {
            r.fix.reset(); // the allocator settings themselves are what is wrong
        }
    }
    return r;
}

Report buildTracedReport(const Scenario &s, const TracedRun &run)
{
    Report r;
    r.scenario = s;
    try {
        const EstimatorOptions opt = estimatorOptions(s);
        r.estimate = estimateTraced(run, opt);
        r.verdict = judge(s.model, run.config, r.estimate, s.gpu, s.reserve, opt);
        r.notes = r.estimate.notes;
        for (const GpuSpec &g : gpuCatalog())
            r.otherCards.emplace_back(g, judge(s.model, run.config, r.estimate, g, s.reserve, opt));
    } catch (const InputError &e) {
        r.error = e.what();
    }
    return r;
}

namespace {
// A preference loss's reference as a sheet names it: "adapter", "copy", "precomputed".
std::string referenceTitle(Reference r)
{
    return r == Reference::None ? std::string("precomputed") : std::string(toString(r));
}
} // namespace

std::string summarize(const TrainingConfig &c)
{
    std::ostringstream o;
    if (c.mode == TrainingMode::DPO || c.mode == TrainingMode::KTO) // "DPO (adapter reference), LoRA r16, ..., batch 2 pairs x 1024"
        o << modeTitle(c.mode) << " (" << referenceTitle(c.dpo.reference) << " reference), ";
    else if (c.mode == TrainingMode::ORPO)
        o << (c.dpo.chosenNll ? "ORPO, " : "ORPO without the chosen cross-entropy (SimPO), ");
    else if (c.mode == TrainingMode::Reward)
        o << "reward model, ";
    else if (c.mode == TrainingMode::GRPO) // "GRPO (no reference, vLLM colocated 0.3), 8 a prompt, prompt 512, ..."
        o << "GRPO (" << (c.dpo.reference == Reference::None ? std::string("no") : referenceTitle(c.dpo.reference))
          << " reference" << (c.grpo.vllm ? c.grpo.vllmServer ? ", vLLM server" : ", vLLM colocated " +
                                                 [&] { std::ostringstream v; v << c.grpo.vllmGpuMemoryUtilization; return v.str(); }()
                                          : std::string())
          << "), " << c.grpo.numGenerations << " a prompt, prompt " << c.dpo.prompt(c.seqLen) << ", ";
    if (c.finetune == FineTune::Full)
        o << "full";
    else
        o << (c.finetune == FineTune::LoRA ? "LoRA r" : "QLoRA r") << c.lora.rank;
    o << ", " << toString(c.precision) << ", " << toString(c.optimizer);
    if (c.optimizer == Optimizer::AdamW)
        o << " (" << toString(c.optimizerImpl) << ")";
    o << ", batch " << c.microBatch << (pairedBatch(c.mode) ? " pairs" : "") << " x " << c.seqLen;
    if (c.gradAccum > 1)
        o << " (accum " << c.gradAccum << ")";
    if (c.gradCheckpointing)
        o << (c.checkpointLayers > 0  ? ", checkpointing the first " + std::to_string(c.checkpointLayers) + " layers"
              : c.checkpointEvery > 1 ? ", checkpointing every " + std::to_string(c.checkpointEvery) + " layers"
                                      : std::string(", checkpointing"));
    o << ", " << toString(c.attention);
    if (c.worldSize > 1 || c.zeroStage > 0) // ZeRO's machinery applies at one GPU too
        o << ", " << c.worldSize << (c.worldSize > 1 ? " GPUs" : " GPU") << " ZeRO-" << c.zeroStage;
    if (c.offloadOptimizer)
        o << ", optimizer on CPU";
    if (c.activationOffload)
        o << ", activations offloaded to the CPU";
    if (c.loss == Loss::Fused)
        o << ", fused loss";
    o << describeVision(c.vision);
    return o.str();
}

std::string describeVision(const TrainingConfig::Vision &v)
{
    if (v.isDefault())
        return {};
    std::ostringstream o;
    if (v.images > 0) // ", 2 images 1024x768 (at most 589824 px)"
        o << ", " << v.images << (v.images == 1 ? " image " : " images ") << v.imageHeight << "x" << v.imageWidth
          << (v.maxPixels > 0 ? " (at most " + std::to_string(v.maxPixels) + " px)" : std::string());
    if (v.videos > 0)
        o << ", " << v.videos << (v.videos == 1 ? " video of " : " videos of ") << v.videoFrames << " frames "
          << v.videoHeight << "x" << v.videoWidth;
    if (v.trainTower || v.trainProjector || !v.trainLanguage)
        o << ", training " << (v.trainTower ? "the vision tower" : "")
          << (v.trainTower && v.trainProjector ? ", " : "") << (v.trainProjector ? "the projector" : "")
          << ((v.trainTower || v.trainProjector) && v.trainLanguage ? " and " : "")
          << (v.trainLanguage ? "the language model" : "");
    return o.str();
}

bool measuredSplits(const Measurement &m, Category c)
{
    return m.attributed() || c == Category::AllocatorSlack || c == Category::CudaContext;
}

Breakdown measuredBreakdown(const Measurement &m)
{
    Breakdown b = m.attribution;
    b[Category::AllocatorSlack] = std::max<int64_t>(0, m.peakReservedBytes - m.peakAllocatedBytes);
    b[Category::CudaContext] = m.cudaContextBytes;
    return b;
}

double estimateError(const Measurement &m, const Estimate &e)
{
    return relativeError(e.peakAllocatedBytes, m.peakAllocatedBytes);
}

json toJson(const GpuSpec &g)
{
    return {{"id", g.id}, {"name", g.name}, {"memory_bytes", g.memoryBytes}};
}

GpuSpec gpuFromJson(const json &j, const std::string &ctx)
{
    const json &idv = requireField(j, "id", ctx);
    if (!idv.is_string())
        throw InputError(ctx + ".id", showJson(idv), "must be a string");
    const std::string id = idv.get<std::string>();
    const int64_t bytes = requireInt64(j, "memory_bytes", ctx, 1, int64_t(1) << 50);
    for (const GpuSpec &g : gpuCatalog())
        if (g.id == id && g.memoryBytes == bytes)
            return g;
    GpuSpec g;
    g.id = id.empty() ? "custom" : boundedName(id);
    g.name = j.contains("name") && j.at("name").is_string() ? boundedName(j.at("name").get<std::string>()) : "Custom GPU";
    g.memoryBytes = bytes;
    return g;
}

namespace {

std::string nowIso()
{
    char buf[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

const Measurement *selected(const Sheet &s)
{
    if (s.selectedMeasurement >= 0 && s.selectedMeasurement < static_cast<int>(s.measurements.size()))
        return &s.measurements[static_cast<size_t>(s.selectedMeasurement)];
    return nullptr;
}

json provenance(const Sheet &s, const std::string &createdAt)
{
    const Measurement *m = selected(s);
    return {{"headroom_version", HEADROOM_VERSION},
            {"created_at", createdAt},
            {"gpu_name", m ? m->deviceName : s.scenario.gpu.name},
            {"measured", m != nullptr},
            {"driver", m ? m->driver : ""},
            {"torch_version", m ? m->torchVersion : ""},
            {"engine", m ? engineProvenance(*m) : ""},
            {"estimator", "headroom core " HEADROOM_VERSION}};
}

// Every written form of a sheet needs the report; a scenario that cannot be estimated has none.
Report reportOrThrow(const Scenario &s, bool withAdvice = true)
{
    Report r = buildReport(s, withAdvice);
    if (!r.error.empty())
        throw InputError("sheet", "configuration", r.error);
    return r;
}

} // namespace

json toJson(const Sheet &s)
{
    const Report r = reportOrThrow(s.scenario);
    const std::string createdAt = s.createdAt.empty() ? nowIso() : s.createdAt;
    json cards = json::array();
    for (const auto &[g, v] : r.otherCards)
        cards.push_back(toJson(v, g));
    json recs = json::array();
    for (const auto &rec : r.recommendations)
        recs.push_back(toJson(rec));
    json ms = json::array();
    for (const auto &m : s.measurements)
        ms.push_back(toJson(m));
    json out = {{"schema_version", kSchemaVersion},
            {"kind", "headroom_sheet"},
            {"provenance", provenance(s, createdAt)},
            {"model", toJson(s.scenario.model)},
            {"config", toJson(s.scenario.config)},
            {"gpu", toJson(s.scenario.gpu)},
            {"reserve", s.scenario.reserve},
            {"alloc_conf", s.scenario.allocConf},
            {"units", toString(s.units)},
            {"estimate", toJson(r.estimate)},
            {"verdict", toJson(r.verdict, s.scenario.gpu)},
            {"other_cards", cards},
            {"recommendations", recs},
            {"measurements", ms},
            {"selected_measurement", s.selectedMeasurement}};
    if (s.pinned) {
        const Report p = reportOrThrow(*s.pinned, false);
        json changes = json::array();
        for (const auto &c : diffScenarios(*s.pinned, s.scenario))
            changes.push_back({{"setting", c.setting}, {"pinned", c.pinned}, {"current", c.current}});
        out["pinned"] = {{"model", toJson(s.pinned->model)},
                         {"config", toJson(s.pinned->config)},
                         {"gpu", toJson(s.pinned->gpu)},
                         {"reserve", s.pinned->reserve},
                         {"alloc_conf", s.pinned->allocConf},
                         {"estimate", toJson(p.estimate)},
                         {"verdict", toJson(p.verdict, s.pinned->gpu)},
                         {"changes", changes}};
    }
    return out;
}

namespace {

// Every sub-reader names its own field; prefix them so the user knows where in the sheet.
template<typename Read> auto within(const std::string &ctx, const std::string &prefix, Read &&read)
{
    try {
        return read();
    } catch (const InputError &e) {
        throw InputError(ctx + "." + prefix + ": " + e.field(), e.value(), e.why());
    }
}

// A sheet's scenario, or its pinned one (ctx "sheet.pinned"): the same fields, read alike.
Scenario scenarioFromJson(const json &j, const std::string &ctx)
{
    if (!j.is_object())
        throw InputError(ctx, showJson(j), "must be an object");
    Scenario s;
    s.model = within(ctx, "model", [&] {
        // A model with no modelled row reopens with its config.json (hf_config), to be traced again.
        ModelArch m = modelArchFromJsonLenient(requireField(j, "model", ctx));
        if (m.estimable)
            m.validate();
        return m;
    });
    s.config = within(ctx, "config", [&] {
        const json &cj = requireField(j, "config", ctx);
        TrainingConfig c = trainingConfigFromJson(cj);
        // A sheet that names no LoRA targets takes the model's own (defaultLoraTargets), as the
        // CLI and the explorer do.
        const bool targetsGiven = cj.contains("lora") && cj.at("lora").is_object() && cj.at("lora").contains("targets");
        if (!targetsGiven)
            c.lora.targets = defaultLoraTargets(s.model);
        c.validate();
        return c;
    });
    s.gpu = gpuFromJson(requireField(j, "gpu", ctx), ctx + ".gpu");
    const json &reserve = requireField(j, "reserve", ctx);
    if (!reserve.is_number() || !(reserve.get<double>() >= 0.0 && reserve.get<double>() < 0.9))
        throw InputError(ctx + ".reserve", reserve.dump(), "must be a number in [0, 0.9)");
    s.reserve = reserve.get<double>();
    if (j.contains("alloc_conf")) {
        const json &ac = j.at("alloc_conf");
        if (!ac.is_string() || ac.get<std::string>().size() > 512)
            throw InputError(ctx + ".alloc_conf", ac.is_string() ? ac.get<std::string>().substr(0, 40) + "..." : ac.dump(),
                             "must be a PYTORCH_CUDA_ALLOC_CONF string of at most 512 characters");
        s.allocConf = ac.get<std::string>();
        (void)parseAllocConf(s.allocConf, ctx + ".alloc_conf"); // names the bad entry
    }
    return s;
}

} // namespace

Sheet sheetFromJson(const json &j)
{
    const std::string ctx = "sheet";
    requireSchema(j, ctx);
    const json &kind = requireField(j, "kind", ctx);
    if (kind != "headroom_sheet")
        throw InputError(ctx + ".kind", kind.dump(), "must be \"headroom_sheet\" (is this a budget sheet?)");
    Sheet s;
    s.scenario = scenarioFromJson(j, ctx);
    // Derived numbers (its estimate, verdict and changes) are recomputed, never read.
    if (j.contains("pinned") && !j.at("pinned").is_null())
        s.pinned = scenarioFromJson(j.at("pinned"), ctx + ".pinned");
    if (j.contains("units")) {
        if (!j.at("units").is_string())
            throw InputError(ctx + ".units", j.at("units").dump(), "must be GiB or GB");
        s.units = parseUnit(j.at("units").get<std::string>(), ctx + ".units");
    }
    if (j.contains("measurements")) {
        const json &ms = j.at("measurements");
        if (!ms.is_array() || ms.size() > 10000)
            throw InputError(ctx + ".measurements", ms.is_array() ? std::to_string(ms.size()) + " entries" : ms.dump(),
                             "must be an array of at most 10000 probe results");
        for (size_t i = 0; i < ms.size(); ++i)
            s.measurements.push_back(within(ctx, "measurements[" + std::to_string(i) + "]",
                                            [&] { return measurementFromJson(ms[i]); }));
    }
    if (j.contains("selected_measurement")) {
        s.selectedMeasurement = static_cast<int>(requireInt64(j, "selected_measurement", ctx, -1,
                                                              static_cast<int64_t>(s.measurements.size()) - 1));
    }
    if (j.contains("provenance"))
        s.createdAt = stringOr(j.at("provenance"), "created_at");
    return s;
}

Sheet sheetFromText(const std::string &text)
{
    return sheetFromJson(parseUntrusted(text, "sheet"));
}

namespace {

using sheetparts::Table;

// A fraction as a percentage: signed (a difference) unless `sign` is false (a share).
std::string pct(double f, bool sign = true)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, sign ? "%+.1f%%" : "%.1f%%", f * 100.0);
    return buf;
}

std::string escapeHtml(const std::string &s)
{
    std::string o;
    for (char c : s) {
        switch (c) {
        case '&': o += "&amp;"; break;
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '"': o += "&quot;"; break;
        default: o += c;
        }
    }
    return o;
}

std::vector<Table> sheetTables(const Sheet &s, const Report &r)
{
    const Unit u = s.units;
    const Measurement *m = selected(s);
    const auto fmt = [&](int64_t b) { return formatBytes(b, u, 2); };
    std::vector<Table> t;
    if (s.pinned)
        t = sheetparts::comparisonTables(*s.pinned, reportOrThrow(*s.pinned, false), s.scenario, r, u);

    Table cfg{"Configuration", {"Setting", "Value"}, {}};
    const TrainingConfig &c = s.scenario.config;
    cfg.rows = {{"Model", s.scenario.model.name + " (" + s.scenario.model.id + ")"},
                {"Parameters", formatParameterCount(r.estimate.params.total)},
                {"Trainable parameters", formatParameterCount(r.estimate.params.trainable)},
                {"Fine-tuning", std::string(toString(c.finetune)) +
                                    (c.finetune == FineTune::Full ? "" : " rank " + std::to_string(c.lora.rank))},
                {"Precision", std::string(toString(c.precision))},
                {"Optimizer", std::string(toString(c.optimizer)) + " (" + std::string(toString(c.optimizerImpl)) + ")"},
                {"Micro-batch x sequence", std::to_string(c.microBatch) + " x " + std::to_string(c.seqLen)},
                {"Gradient accumulation", std::to_string(c.gradAccum)},
                {"Gradient checkpointing", c.gradCheckpointing ? "on" : "off"},
                {"Attention", std::string(toString(c.attention))},
                {"GPUs, ZeRO stage", std::to_string(c.worldSize) + ", " + std::to_string(c.zeroStage)},
                {"Optimizer state", c.offloadOptimizer ? "offloaded to the CPU" : "on the GPU"},
                {"GPU", s.scenario.gpu.name + " (" + fmt(s.scenario.gpu.memoryBytes) + ")"},
                {"Reserve", std::to_string(static_cast<int>(std::lround(s.scenario.reserve * 100))) + "%"},
                {"Allocator (PYTORCH_CUDA_ALLOC_CONF)", s.scenario.allocConf.empty() ? "defaults" : s.scenario.allocConf}};
    if (c.mode != TrainingMode::SFT) { // issue 29: the objective, where it is not supervised fine-tuning
        std::string obj = c.mode == TrainingMode::Reward ? std::string("reward model (sequence classifier, one label), pairs")
                                                         : modeTitle(c.mode);
        if (hasPreferenceBlock(c.mode)) {
            if (c.mode != TrainingMode::ORPO)
                obj += ", reference " + referenceTitle(c.dpo.reference);
            obj += ", prompt " + std::to_string(c.dpo.prompt(c.seqLen)) + " tokens, beta " + formatSetting(c.dpo.beta);
        }
        cfg.rows.insert(cfg.rows.begin() + 3, {"Objective", obj});
    }
    t.push_back(cfg);

    Table bd{"Breakdown at the peak (" + std::string(label(r.estimate.peakPhase)) + ")",
             {"Category", "Estimated", "Measured"}, {}};
    const Breakdown mb = m ? measuredBreakdown(*m) : Breakdown{};
    for (Category cat : kDisplayCategories)
        if (writesCategory(cat, r.estimate.peak[cat] + mb[cat]))
            bd.rows.push_back({std::string(label(cat)), fmt(r.estimate.peak[cat]),
                               m && measuredSplits(*m, cat) ? fmt(mb[cat]) : "-"});
    bd.rows.push_back({"Peak allocated", fmt(r.estimate.peakAllocatedBytes), m ? fmt(m->peakAllocatedBytes) : "-"});
    bd.rows.push_back({"Peak reserved", fmt(r.estimate.peakReservedBytes), m ? fmt(m->peakReservedBytes) : "-"});
    bd.rows.push_back({"Device total", fmt(r.estimate.deviceTotalBytes), m ? fmt(m->deviceTotalBytes()) : "-"});
    t.push_back(bd);
    if (const Breakdown &v = r.estimate.peakVision; v.total() > 0) { // Note [Vision share]
        Table vt{"Of it, the vision tower and projector", {"Category", "Estimated", "Share of the category"}, {}};
        for (Category cat : kDisplayCategories)
            if (v[cat] > 0)
                vt.rows.push_back({std::string(label(cat)), fmt(v[cat]),
                                   pct(static_cast<double>(v[cat]) / static_cast<double>(r.estimate.peak[cat]), false)});
        vt.rows.push_back({"In all", fmt(v.total()),
                           pct(static_cast<double>(v.total()) / static_cast<double>(r.estimate.peak.total()), false)});
        t.push_back(vt);
    }

    Table ph{"Phases (peak allocated)", {"Phase", "Estimated", "Measured"}, {}};
    for (Phase p : kAllPhases) {
        const auto mp = m ? m->steady(p) : std::nullopt;
        ph.rows.push_back({std::string(label(p)), fmt(r.estimate.phase(p).peakAllocatedBytes),
                           mp ? fmt(mp->peakAllocatedBytes) : "-"});
    }
    t.push_back(ph);

    Table cards{"Verdict by card", {"GPU", "Memory", "Needed", "Verdict", "Headroom"}, {}};
    const auto cardRow = [&](const GpuSpec &g, const Verdict &v) {
        return std::vector<std::string>{g.name, fmt(v.capacityBytes), fmt(v.neededBytes), std::string(toString(v.fit)),
                                        headroomPhrase(v)};
    };
    cards.rows.push_back(cardRow(s.scenario.gpu, r.verdict));
    cards.rows.back()[0] += " (chosen)";
    // The rest of the catalog, smallest card first.
    std::vector<const std::pair<GpuSpec, Verdict> *> others;
    for (const auto &c : r.otherCards)
        if (c.first.id != s.scenario.gpu.id)
            others.push_back(&c);
    std::stable_sort(others.begin(), others.end(),
                     [](const auto *a, const auto *b) { return a->second.capacityBytes < b->second.capacityBytes; });
    for (const auto *c : others)
        cards.rows.push_back(cardRow(c->first, c->second));
    t.push_back(cards);

    Table recs{"Recommendations (in this order)", {"#", "Change", "Kind", "Saves", "Cost", "Fits after"}, {}};
    int i = 1;
    for (const auto &rec : r.recommendations)
        recs.rows.push_back({std::to_string(i++), rec.title, std::string(toString(rec.group)),
                             rec.savingBytes >= 0 ? fmt(rec.savingBytes) : "+" + fmt(-rec.savingBytes) + " more",
                             rec.cost, rec.fitsAfter ? "yes" : "no"});
    t.push_back(recs);
    if (!r.notes.empty()) {
        Table notes{"Notes", {"Note"}, {}};
        for (const auto &n : r.notes)
            notes.rows.push_back({n});
        t.push_back(notes);
    }

    if (!s.measurements.empty()) {
        Table runs{"Measurements",
                   {"#", "Device", "Configuration", "Peak allocated", "Error vs estimate", "Ranks", "Result"},
                   {}};
        int k = 1;
        for (const auto &mm : s.measurements) {
            std::string err = "-";
            try {
                err = pct(estimateError(mm, estimate(mm.model, mm.config)));
            } catch (const InputError &) {
            }
            // Several ranks: the busiest one's peak, and how far apart the ranks were.
            std::string ranks = "-";
            if (!mm.ranks.empty()) {
                char spread[64];
                std::snprintf(spread, sizeof spread, "%zu x %s, spread %.3f%s", mm.ranks.size(), mm.backend.c_str(),
                              rankSpread(mm), rankSpread(mm) > kUnevenSpread ? " (uneven)" : "");
                ranks = spread;
            }
            runs.rows.push_back({std::to_string(k++), mm.deviceName + " (" + mm.engine + ")", mm.model.name + ", " + summarize(mm.config),
                                 fmt(mm.peakAllocatedBytes), err, ranks,
                                 mm.oom ? "OOM in " + std::string(toString(mm.oom->phase)) : "ok"});
        }
        t.push_back(runs);
    }

    const json prov = provenance(s, s.createdAt.empty() ? nowIso() : s.createdAt);
    Table pv{"Provenance", {"Item", "Value"}, {}};
    pv.rows = {{"Headroom version", prov["headroom_version"]},
               {"Created", prov["created_at"]},
               {"GPU", prov["gpu_name"]},
               {"Driver", m ? m->driver : "(not measured)"},
               {"Measured by", m ? engineProvenance(*m) : "(not measured)"}};
    t.push_back(pv);
    return t;
}

} // namespace

std::string verdictLine(const Report &r, Unit units)
{
    const Scenario &s = r.scenario;
    std::ostringstream o;
    const Verdict &v = r.verdict;
    // The banner's words: "Out of memory: peak 107.3 GiB of 78.6 GiB, 36.5% over the card on ...".
    o << (v.fit == Fit::Fits ? "Fits" : v.fit == Fit::Tight ? "Tight" : "Out of memory") << ": peak "
      << formatBytes(v.neededBytes, units, 1) << " of " << formatBytes(v.capacityBytes, units, 1) << ", "
      << headroomPhrase(v) << " on " << s.gpu.name << " (reserve " << std::lround(s.reserve * 100) << "%).";
    if (v.cacheFlushes > 0)
        o << " Fits only because " << cacheFlushNote(v) << '.';
    return o.str();
}

namespace {
std::string verdictLine(const Sheet &s, const Report &r)
{
    return verdictLine(r, s.units);
}
} // namespace

const char *fitColor(Fit f)
{
    return f == Fit::Fits ? "#1b7f3b" : f == Fit::Tight ? "#a15c00" : "#b3261e";
}

Headline sheetHeadline(const Sheet &s)
{
    const Report r = reportOrThrow(s.scenario, false); // the verdict needs no advice pass
    return {verdictLine(s, r), r.verdict.fit};
}

std::string sheetMarkdown(const Sheet &s)
{
    const Report r = reportOrThrow(s.scenario);
    std::ostringstream o;
    o << "# GPU memory budget: " << s.scenario.model.name << "\n\n**" << verdictLine(s, r) << "**\n";
    for (const Table &t : sheetTables(s, r)) {
        o << "\n## " << t.title << "\n\n|";
        for (const auto &h : t.header)
            o << " " << h << " |";
        o << "\n|";
        for (size_t i = 0; i < t.header.size(); ++i)
            o << (t.numeric(i) ? "---:|" : ":---|");
        o << "\n";
        for (const auto &row : t.rows) {
            o << "|";
            for (const auto &cell : row)
                o << " " << cell << " |";
            o << "\n";
        }
    }
    return o.str();
}

std::string sheetHtml(const Sheet &s, const std::string &chartImageSrc, const std::string &timelineImageSrc, bool forPage)
{
    const Report r = reportOrThrow(s.scenario);
    std::ostringstream o;
    const char *color = fitColor(r.verdict.fit);
    o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>GPU memory budget: "
      << escapeHtml(s.scenario.model.name) << "</title>\n<style>body{font-family:sans-serif;"
      << (forPage ? "margin:0}" : "max-width:60em;margin:2em auto}")
      << "table{border-collapse:collapse;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px}"
         "td.n{text-align:right}th{background:#eee}</style></head><body>\n"
      << "<h1>GPU memory budget: " << escapeHtml(s.scenario.model.name) << "</h1>\n<p style=\"color:" << color
      << ";font-weight:bold\">" << escapeHtml(verdictLine(s, r)) << "</p>\n";
    if (!chartImageSrc.empty())
        o << "<p><img alt=\"breakdown chart\" width=\"640\" src=\"" << escapeHtml(chartImageSrc) << "\"></p>\n";
    if (!timelineImageSrc.empty())
        o << "<h2>Memory over one steady step</h2>\n<p><img alt=\"timeline\" width=\"640\" src=\""
          << escapeHtml(timelineImageSrc) << "\"></p>\n";
    for (const Table &t : sheetTables(s, r)) {
        o << "<h2>" << escapeHtml(t.title) << "</h2>\n<table width=\"100%\" cellspacing=\"0\" cellpadding=\"3\" border=\"1\"><tr>";
        for (const auto &h : t.header)
            o << "<th>" << escapeHtml(h) << "</th>";
        o << "</tr>\n";
        for (const auto &row : t.rows) {
            o << "<tr>";
            for (size_t i = 0; i < row.size(); ++i)
                o << (t.numeric(i) ? "<td class=\"n\">" : "<td>") << escapeHtml(row[i]) << "</td>";
            o << "</tr>\n";
        }
        o << "</table>\n";
    }
    o << "</body></html>\n";
    return o.str();
}

std::string sheetCsv(const Sheet &s)
{
    const Report r = reportOrThrow(s.scenario);
    const Measurement *m = selected(s);
    const Breakdown mb = m ? measuredBreakdown(*m) : Breakdown{};
    std::ostringstream o;
    o << "section,name,estimated_bytes,measured_bytes\n";
    const auto row = [&](const char *section, std::string_view name, int64_t est, std::optional<int64_t> meas) {
        o << section << "," << name << "," << est << "," << (meas ? std::to_string(*meas) : "") << "\n";
    };
    for (Category c : kAllCategories)
        if (writesCategory(c, r.estimate.peak[c] + mb[c]))
            row("category", toString(c), r.estimate.peak[c],
                m && measuredSplits(*m, c) ? std::optional<int64_t>(mb[c]) : std::nullopt);
    for (Category c : kAllCategories) // Note [Vision share]
        if (r.estimate.peakVision[c] > 0)
            row("vision_category", toString(c), r.estimate.peakVision[c], std::nullopt);
    for (Phase p : kAllPhases) {
        const auto mp = m ? m->steady(p) : std::nullopt;
        row("phase", toString(p), r.estimate.phase(p).peakAllocatedBytes,
            mp ? std::optional<int64_t>(mp->peakAllocatedBytes) : std::nullopt);
    }
    row("total", "peak_allocated", r.estimate.peakAllocatedBytes, m ? std::optional<int64_t>(m->peakAllocatedBytes) : std::nullopt);
    row("total", "peak_reserved", r.estimate.peakReservedBytes, m ? std::optional<int64_t>(m->peakReservedBytes) : std::nullopt);
    row("total", "device_total", r.estimate.deviceTotalBytes, m ? std::optional<int64_t>(m->deviceTotalBytes()) : std::nullopt);
    for (const auto &[g, v] : r.otherCards)
        row("card_headroom", g.id, v.headroomBytes(), std::nullopt);
    if (s.pinned) { // the pinned configuration's estimate, in the estimated column (issue 31)
        const Report p = reportOrThrow(*s.pinned, false);
        for (Category c : kAllCategories)
            if (writesCategory(c, p.estimate.peak[c]))
                row("pinned_category", toString(c), p.estimate.peak[c], std::nullopt);
        row("pinned_total", "peak_allocated", p.estimate.peakAllocatedBytes, std::nullopt);
        row("pinned_total", "peak_reserved", p.estimate.peakReservedBytes, std::nullopt);
        row("pinned_total", "device_total", p.estimate.deviceTotalBytes, std::nullopt);
        row("pinned_card_headroom", s.pinned->gpu.id, p.verdict.headroomBytes(), std::nullopt);
    }
    return o.str();
}

} // namespace headroom
