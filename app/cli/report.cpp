// What headroom-cli prints about a configuration (report.h).

#include "report.h"
#include "say.h"

#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/json_input.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"
#include "headroom/sheet.h"
#include "headroom/support.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace headroom::cli {

std::string human(int64_t bytes)
{
    return formatGiB(bytes, 2);
}

int presetIdWidth()
{
    size_t w = 2;
    for (const auto &m : modelPresets())
        w = std::max(w, m.id.size());
    return static_cast<int>(w);
}

std::string describeConfig(const ModelArch &m, const TrainingConfig &c)
{
    std::ostringstream o;
    o << m.name << " | ";
    if (c.mode == TrainingMode::DPO || c.mode == TrainingMode::KTO) // issue 29: the mode and its reference first
        o << toString(c.mode) << " (" << toString(c.dpo.reference) << " reference, prompt " << c.dpo.prompt(c.seqLen) << ") | ";
    else if (c.mode == TrainingMode::ORPO)
        o << (c.dpo.chosenNll ? "orpo" : "orpo without the chosen cross-entropy (SimPO: cpo_alpha 0)") << " (prompt "
          << c.dpo.prompt(c.seqLen) << ") | ";
    else if (c.mode == TrainingMode::Reward)
        o << "reward model (sequence classifier, 1 label) | ";
    o << toString(c.finetune);
    if (c.finetune != FineTune::Full)
        o << " r" << c.lora.rank;
    o << " | " << toString(c.precision) << " | " << toString(c.optimizer) << " (" << toString(c.optimizerImpl)
      << ") | batch " << c.microBatch << (pairedBatch(c.mode) ? " pairs" : "") << " x seq " << c.seqLen;
    if (c.gradAccum > 1)
        o << " x accum " << c.gradAccum;
    o << " | " << toString(c.attention)
      << (!c.gradCheckpointing        ? std::string()
          : c.checkpointLayers > 0     ? " | checkpointing " + std::to_string(c.checkpointLayers) + " layers"
          : c.checkpointEvery > 1      ? " | checkpointing every " + std::to_string(c.checkpointEvery) + " layers"
                                       : std::string(" | checkpointing"))
      << (c.loss == Loss::Fused ? " | fused loss" : "") << (c.activationOffload ? " | activation offload" : "");
    if (c.worldSize > 1 || c.zeroStage > 0) // ZeRO's machinery applies at one GPU too
        o << " | " << c.worldSize << (c.worldSize > 1 ? " GPUs" : " GPU") << ", ZeRO-" << c.zeroStage;
    if (const std::string v = describeVision(c.vision); !v.empty()) // issue 30: ", 2 images ..." as " | 2 images ..."
        o << " |" << v.substr(1);
    return o.str();
}

void printTable(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu, double reserve,
                const std::vector<Recommendation> &recs, const EstimatorOptions &opt, const Room *room)
{
    std::printf("%s\n", describeConfig(m, c).c_str());
    std::printf("Parameters: %.3f B total, %.2f M trainable\n\n", e.params.total / 1e9, e.params.trainable / 1e6);
    const bool vision = e.peakVision.total() > 0; // Note [Vision share]: its own column
    std::printf("%-18s %14s%s\n", "category", ("at " + std::string(toString(e.peakPhase)) + " peak").c_str(),
                vision ? "   of it, vision tower + projector" : "");
    for (Category cat : kDisplayCategories)
        if (e.peak[cat] > 0) {
            std::printf("%-18s %14s", std::string(toString(cat)).c_str(), human(e.peak[cat]).c_str());
            if (vision && e.peakVision[cat] > 0)
                std::printf("   %14s", human(e.peakVision[cat]).c_str());
            std::printf("\n");
        }
    if (vision)
        std::printf("%-18s %14s   %14s\n", "", "", (human(e.peakVision.total()) + " in all").c_str());
    std::printf("\nphase peaks (allocated):");
    for (const PhaseEstimate *p : e.stepPhases())
        std::printf("  %s %s", std::string(toString(p->phase)).c_str(), human(p->peakAllocatedBytes).c_str());
    std::printf("\npeak allocated %s | peak reserved %s | nvidia-smi total %s\n", human(e.peakAllocatedBytes).c_str(),
                human(e.peakReservedBytes).c_str(), human(e.deviceTotalBytes).c_str());
    const Verdict v = judge(m, c, e, gpu, reserve, opt);
    const std::string vllm = v.colocatedBytes > 0 ? " and " + human(v.colocatedBytes) + " colocated vLLM holds" : "";
    std::printf("\n%s on %s: needs %s of %s (%s, %.0f%% reserve; the card's %s less %s its driver keeps%s)\n",
                v.fit == Fit::Fits ? "FITS" : v.fit == Fit::Tight ? "TIGHT" : "OOM", gpu.name.c_str(),
                human(v.neededBytes).c_str(), human(v.capacityBytes).c_str(), headroomPhrase(v).c_str(),
                100.0 * reserve, human(gpu.memoryBytes).c_str(),
                human(gpu.memoryBytes - v.capacityBytes - v.colocatedBytes).c_str(), vllm.c_str());
    if (v.cacheFlushes > 0)
        cli::say(stdout, "note: ", cacheFlushNote(v));
    if (m.estimable) // a traced estimate has no model row for the card's notes
        for (const auto &n : cardNotes(m, c, e, gpu, reserve, opt, room))
            cli::say(stdout, "note: ", n);
    for (const auto &n : e.notes)
        cli::say(stdout, "note: ", n);
    if (!recs.empty()) {
        std::printf("\nrecommendations (dynamic first, then static, then sharding; then what it can grow to):\n");
        int i = 1;
        for (const auto &r : recs)
            std::printf("%2d. [%s] %s: %s %s%s; cost: %s\n", i++, std::string(toString(r.group)).c_str(),
                        r.title.c_str(), r.savingBytes >= 0 ? "saves" : "uses",
                        human(r.savingBytes >= 0 ? r.savingBytes : -r.savingBytes).c_str(),
                        r.group != RecommendationGroup::Increase && r.fitsAfter ? " (then fits)" : "", r.cost.c_str());
    }
}

// `compare`: a probe result against the estimate of the same model and configuration, phase by
// phase and rank by rank. Exit 1 when a phase or rank misses by more than the tolerance, or the
// ranks are uneven, so scripts can gate on it.
// compare's error column: a signed percentage, or n/a where the measurement is 0 bytes (null in the
// JSON: a division by zero is not a 0% error).
static std::string errorColumn(const nlohmann::json &error)
{
    if (error.is_null())
        return "      n/a";
    char b[32];
    std::snprintf(b, sizeof b, "%+8.2f%%", 100 * error.get<double>());
    return b;
}

int compare(const std::string &path, double tolerance, bool asJson)
{
    if (!(tolerance >= 0.0 && tolerance <= 1.0)) // also NaN
        throw InputError("--tolerance", std::to_string(tolerance), "must be a fraction in [0, 1]");
    // Bounded before it reads, and never blocking on a FIFO or a device (issue 32, row 3).
    const std::string text = readRegularFile(path, "RESULT");
    const Measurement m = measurementFromJson(parseUntrusted(text, "result"));
    // A result with no steady step, or whose every steady phase measured 0 bytes, is not a
    // measurement (a probe that never ran the step): refused in one line, never a table of 0%
    // errors. An out-of-memory result is compared as it is (it says where it failed).
    if (!m.oom) {
        bool bytes = false;
        for (Phase p : kAllPhases) {
            const auto sp = m.steady(p);
            // Every phase of a training step the estimate has must have been measured after the
            // warm-up (issue 32, row 5: an after-load-only result, or warmup_steps past the last
            // step, passed the gate on nothing).
            if (!sp && p != Phase::AfterLoad)
                throw InputError("RESULT", path, "has no steady-state step to compare (no " + std::string(toString(p)) +
                                                     " phase after the warm-up): not a measurement; measure with at "
                                                     "least one step after the warm-up");
            bytes = bytes || (sp && sp->peakAllocatedBytes > 0);
        }
        if (!bytes)
            throw InputError("RESULT", path, "every steady phase measured 0 bytes: not a measurement (the step never "
                                             "ran on the device); measure again");
    }
    const Estimate e = estimate(m.model, m.config);
    auto err = [](int64_t measured, int64_t estimated) { return relativeError(estimated, measured); };
    bool ok = true;
    int compared = 0;
    nlohmann::json phases = nlohmann::json::array(), ranks = nlohmann::json::array();
    for (Phase p : kStepOrder) {
        const auto sp = m.steady(p);
        if (!sp)
            continue;
        const double d = err(sp->peakAllocatedBytes, e.phase(p).peakAllocatedBytes);
        // A phase that measured nothing is no evidence: it fails the gate rather than pass at 0%.
        ok = ok && sp->peakAllocatedBytes > 0 && std::abs(d) <= tolerance;
        ++compared;
        phases.push_back({{"phase", toString(p)},
                          {"measured_bytes", sp->peakAllocatedBytes},
                          {"estimated_bytes", e.phase(p).peakAllocatedBytes},
                          {"error", sp->peakAllocatedBytes > 0 ? nlohmann::json(d) : nlohmann::json()}});
    }
    for (const auto &r : m.ranks) {
        const double d = err(r.peakAllocatedBytes, e.peakAllocatedBytes);
        ok = ok && !r.oom && r.peakAllocatedBytes > 0 && std::abs(d) <= tolerance;
        ranks.push_back({{"rank", r.rank},
                         {"measured_bytes", r.peakAllocatedBytes},
                         {"estimated_bytes", e.peakAllocatedBytes},
                         {"error", r.peakAllocatedBytes > 0 ? nlohmann::json(d) : nlohmann::json()},
                         {"oom", r.oom}});
    }
    const double spread = rankSpread(m);
    ok = ok && compared > 0 && spread <= kUnevenSpread && !m.oom;
    if (compared == 0)
        std::fprintf(stderr, "headroom-cli: compare: %s has no steady-state phase to compare\n", path.c_str());
    if (asJson) {
        nlohmann::json j = {{"model", m.model.id},
                            {"config", summarize(m.config)},
                            {"device", m.deviceName},
                            {"tolerance", tolerance},
                            {"phases", phases},
                            {"within_tolerance", ok}};
        if (!m.ranks.empty()) {
            j["backend"] = m.backend;
            j["ranks"] = ranks;
            j["spread"] = spread;
            j["uneven"] = spread > kUnevenSpread;
        }
        if (m.oom)
            j["oom"] = {{"phase", toString(m.oom->phase)}, {"in_use_bytes", m.oom->inUseBytes}};
        std::printf("%s\n", j.dump(2).c_str());
        return ok ? 0 : 1;
    }
    std::printf("%s | %s | %s\n", m.model.name.empty() ? m.model.id.c_str() : m.model.name.c_str(),
                summarize(m.config).c_str(), m.deviceName.c_str());
    if (m.device == "cpu")
        std::printf("note: a CPU measurement; the estimate models CUDA (a 64 MiB cuBLAS workspace, flash-attention "
                    "kernels), so a CPU run sits below it\n");
    if (m.oom)
        std::printf("measured: out of memory in %s with %s in use; estimated peak allocated %s\n",
                    std::string(toString(m.oom->phase)).c_str(), human(m.oom->inUseBytes).c_str(),
                    human(e.peakAllocatedBytes).c_str());
    std::printf("\n%-12s %14s %14s %9s\n", "phase", "measured", "estimated", "error");
    for (const auto &p : phases)
        std::printf("%-12s %14s %14s %s\n", p["phase"].get<std::string>().c_str(), human(p["measured_bytes"]).c_str(),
                    human(p["estimated_bytes"]).c_str(), errorColumn(p["error"]).c_str());
    if (!m.ranks.empty()) {
        std::printf("\n%zu rank%s over %s, peak allocated against the estimate's per-rank peak:\n", m.ranks.size(),
                    m.ranks.size() == 1 ? "" : "s", m.backend.c_str());
        for (const auto &r : ranks)
            std::printf("rank %-7d %14s %14s %s%s\n", r["rank"].get<int>(), human(r["measured_bytes"]).c_str(),
                        human(r["estimated_bytes"]).c_str(), errorColumn(r["error"]).c_str(),
                        r["oom"].get<bool>() ? "  out of memory" : "");
        std::printf("spread %.4f (max/min)%s\n", spread, spread > kUnevenSpread ? ": UNEVEN, above 1%" : "");
    }
    std::printf("\n%s (tolerance %.1f%%)\n", ok ? "within tolerance" : "OUTSIDE tolerance", 100 * tolerance);
    return ok ? 0 : 1;
}


} // namespace headroom::cli
