#pragma once

#include "headroom/budget.h"
#include "headroom/measurement.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace headroom {

enum class Unit { GiB, GB };
std::string_view toString(Unit u);
Unit parseUnit(std::string_view s, const std::string &field = "units");
double toUnit(int64_t bytes, Unit u);
std::string formatBytes(int64_t bytes, Unit u, int decimals = 1);

// Everything a user set up: the budget sheet is this state as one JSON document, and opening the
// sheet restores it (docs/style.md point 14). Derived numbers are recomputed, never trusted from a file.
struct Scenario
{
    ModelArch model;
    TrainingConfig config;
    GpuSpec gpu;
    double reserve = 0.10;
    std::string allocConf; // PYTORCH_CUDA_ALLOC_CONF the run will use ("" for the defaults)

    bool operator==(const Scenario &o) const;
    bool operator!=(const Scenario &o) const { return !(*this == o); }
};

// What the estimator needs beyond the model and configuration: the allocator settings.
// Throws InputError (field "alloc_conf") for settings it cannot parse.
EstimatorOptions estimatorOptions(const Scenario &s);

// The default the app and scripts/run open on: Llama-3.1-8B, LoRA r16, batch 4 x 2048, bf16, H100 80 GB.
Scenario defaultScenario();

// Everything derived from a Scenario: what the GUI shows and what a sheet prints.
struct Report
{
    Scenario scenario;
    Estimate estimate;
    Verdict verdict;
    std::vector<Recommendation> recommendations;
    std::vector<std::pair<GpuSpec, Verdict>> otherCards; // common cards, same configuration
    std::vector<std::string> notes; // the estimator's, then the card's (bf16, room to grow, a card that fits)
    std::string error; // non-empty when the scenario cannot be estimated (the InputError text)
    std::optional<QuickFix> fix; // with an error: the nearest configuration that can be estimated
};
// `withAdvice` false: the estimate and the verdicts only, without the recommendations (which
// estimate a dozen alternatives and run the solvers), for a first answer while they compute.
Report buildReport(const Scenario &s, bool withAdvice = true);
struct TracedRun;
// The report of a scenario whose model has no row, from a trace of it (traced.h): the estimate
// replayed from the trace and the verdicts on every card; no recommendations (they estimate
// alternatives, which needs a row or a trace each).
Report buildTracedReport(const Scenario &s, const TracedRun &run);

struct Sheet
{
    Scenario scenario;
    // Issue 31: a configuration pinned for comparison, written beside this one (its estimate,
    // verdict and the changes from it to `scenario`); the sheet reopens with it pinned.
    std::optional<Scenario> pinned;
    Unit units = Unit::GiB;
    std::vector<Measurement> measurements;
    int selectedMeasurement = -1; // index into measurements, -1 for none
    std::string createdAt;        // ISO 8601 UTC; filled when written
};

nlohmann::json toJson(const GpuSpec &g);
GpuSpec gpuFromJson(const nlohmann::json &j, const std::string &ctx = "gpu");

// The JSON sheet: the state plus the derived report and provenance, for people and tools.
nlohmann::json toJson(const Sheet &s);
// Strict: every problem throws InputError naming the field ("sheet.config.micro_batch").
Sheet sheetFromJson(const nlohmann::json &j);
Sheet sheetFromText(const std::string &text);

// Human forms of the same sheet. `chartImageSrc` (optional): an img src for the chart, e.g. a data: URL.
std::string sheetMarkdown(const Sheet &s);
// The verdict in the banner's words ("Fits: peak 107.3 GiB of 139.8 GiB, 23.3% headroom on ..."),
// and the fit it is drawn for.
struct Headline
{
    std::string text;
    Fit fit = Fit::Fits;
};
Headline sheetHeadline(const Sheet &s);
// The same words for any report that has a verdict (its scenario's card and reserve).
std::string verdictLine(const Report &r, Unit units);
// The colour a verdict is written in: green fits, amber tight, red out of memory.
const char *fitColor(Fit f);
std::string sheetCsv(const Sheet &s);
// For a printed page (`forPage`), no screen margins around the column: the page has its own.
std::string sheetHtml(const Sheet &s, const std::string &chartImageSrc = {}, const std::string &timelineImageSrc = {},
                      bool forPage = false);

// One setting that differs between two scenarios, in the sheet's JSON names ("config.micro_batch",
// "lora.rank", "model", "gpu"), each value as written there (strings bare, a GPU by its name).
struct ScenarioChange
{
    std::string setting;
    std::string pinned;
    std::string current;
};
// Every setting that differs, in the order of the sheet's JSON. A different model is one change
// (its name and id), not its every field; LoRA's settings count only where either side uses LoRA.
std::vector<ScenarioChange> diffScenarios(const Scenario &pinned, const Scenario &current);
// The amounts a comparison sets side by side: each category at each one's own peak, then peak
// allocated, peak reserved, the device total and the headroom left on each one's card.
struct ComparedAmount
{
    std::string name;
    int64_t pinned = 0;
    int64_t current = 0;
};
std::vector<ComparedAmount> compareReports(const Report &pinned, const Report &current);
// "+1.25 GiB", "-0.50 GiB", "0": a difference in the sheet's units.
std::string signedBytes(int64_t difference, Unit u);

// The estimate's error on peak allocated against a measurement, by relativeError's convention.
double estimateError(const Measurement &m, const Estimate &e);

} // namespace headroom

namespace headroom {
// "LoRA r16, bf16, adamw (foreach), batch 4 x 2048, sdpa": one line for tables and titles.
std::string summarize(const TrainingConfig &c);
// Issue 30: a vision-language step's pixels and what trains, as summarize() appends them
// (", 2 images 1024x768 (at most 589824 px), training the vision tower and the language model");
// empty for a text step.
std::string describeVision(const TrainingConfig::Vision &v);
// A measurement's device picture: its attribution plus the allocator's slack (reserved -
// allocated) and the CUDA context, so it stacks like an estimate.
Breakdown measuredBreakdown(const Measurement &m);
// Whether a measurement knows category `c` at its peak: all of them where the engine attributed
// the peak; only the allocator's slack and the CUDA context where it did not.
bool measuredSplits(const Measurement &m, Category c);
} // namespace headroom
