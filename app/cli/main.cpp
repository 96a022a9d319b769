// headroom-cli: the estimator for scripts. Exit 0 on success, 2 on bad usage or input with
// one line naming the flag or field and the value.

#include "headroom/budget.h"
#include "headroom/files.h"
#include "headroom/catalog.h"
#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/json_input.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"
#include "headroom/sheet.h"
#include "headroom/support.h"
#include "headroom/timeline.h"
#include "headroom/traced.h"
#include "headroom/training_formats.h"

#include "flags.h"
#include "hubfetch.h"
#include "report.h"
#include "say.h"
#include "traced_run.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

using namespace headroom;
using namespace headroom::cli;

// An estimate from a trace: its phases, peaks and verdict, and where it came from; no model row
// for the card notes or the levers (recommend() needs one).
int printTraced(const TracedRun &run, const std::string &source, const Flags &f, bool check)
{
    const GpuSpec gpu = findGpu(f.gpu, "--gpu");
    const double reserve = parseFraction("--reserve", f.reserve);
    EstimatorOptions opt = optionsFor(f);
    const Estimate e = estimateTraced(run, opt);
    ModelArch m; // no row: the trace's type and file name for the header
    m.id = source;
    m.name = run.modelType.empty() ? std::string("traced model") : run.modelType;
    m.modelType = run.modelType;
    m.estimable = false;
    const Verdict v = judge(m, run.config, e, gpu, reserve, opt);
    if (f.json) {
        std::printf("%s\n", cli::tracedDocument(run, source, e, v, gpu).dump(2).c_str());
    } else {
        printTable(m, run.config, e, gpu, reserve, {}, opt);
    }
    return check && v.fit == Fit::OOM ? 1 : 0;
}

int runCli(int argc, char **argv)
{
    CLI::App app{"headroom-cli: GPU memory budgets for training runs"};
    app.set_version_flag("--version", std::string("headroom-cli ") + HEADROOM_VERSION);
    app.require_subcommand(1);
    Flags f;

    auto *est = app.add_subcommand("estimate", "Estimate one configuration's peak memory");
    addTrainingFlags(est, f, false);
    est->add_flag("--json", f.json, "Print one JSON object");
    std::string fromTrace;
    est->add_option("--from-trace", fromTrace,
                    "Estimate from a traced step (headroom-probe --engine transformers --trace --timeline FILE): any "
                    "model type your Transformers builds; the training flags come from the trace");
    bool check = false;
    est->add_flag("--check", check,
                  "Launch guard: exit 1 when the verdict is out of memory, 0 otherwise (tight: a warning on stderr)");
    Flags ft;
    auto *tl = app.add_subcommand("timeline", "Every allocation and free of the estimated run, as a probe_timeline JSON");
    addTrainingFlags(tl, ft, false);

    auto *sw = app.add_subcommand("sweep", "Scaling table over sequence lengths, batches and checkpointing");
    Flags fs;
    addTrainingFlags(sw, fs, true);
    sw->add_option("--format", fs.format, "markdown | csv")->capture_default_str();

    auto *mb = app.add_subcommand("max-batch", "Largest micro-batch that fits the GPU");
    Flags fb;
    addTrainingFlags(mb, fb, false);
    auto *ms = app.add_subcommand("max-seq", "Longest sequence that fits the GPU");
    Flags fq;
    addTrainingFlags(ms, fq, false);
    int64_t seqMultiple = 1;
    ms->add_option("--multiple-of", seqMultiple, "Only lengths that are a multiple of this (e.g. 128)")->capture_default_str();
    bool modelsJson = false, gpusJson = false;
    auto *models = app.add_subcommand("models", "List the built-in model presets");
    models->add_flag("--json", modelsJson, "JSON output");
    auto *gpus = app.add_subcommand("gpus", "List the GPU catalog");
    gpus->add_flag("--json", gpusJson, "JSON output");

    std::string resultPath;
    double tolerance = 0.03;
    bool compareJson = false;
    auto *cmp = app.add_subcommand("compare", "A probe result against the estimate of its configuration (exit 1 if off)");
    cmp->add_option("RESULT", resultPath, "headroom-probe result JSON (--out)")->required();
    cmp->add_option("--tolerance", tolerance, "Largest |error| per phase and rank, as a fraction")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmp->add_flag("--json", compareJson, "Print one JSON object");

    Flags fx;
    auto *ex = app.add_subcommand("export", "The configuration as a training config: Axolotl, LLaMA-Factory, the HF "
                                            "Trainer/TRL, DeepSpeed or accelerate");
    addTrainingFlags(ex, fx, false);
    std::string exportFormat, exportOut;
    ex->add_option("--format", exportFormat, "axolotl | llamafactory | llamafactory-v1 | trainer | deepspeed | accelerate")->required();
    ex->add_option("--out", exportOut, "Write to this file instead of stdout (an earlier file survives a failed write)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        cli::say(stderr, "headroom-cli: error: ", e.what());
        return 2;
    }

    try {
        if (*cmp)
            return compare(resultPath, tolerance, compareJson);
        if (*ex) {
            const TrainingFormat format = parseTrainingFormat(exportFormat, "--format");
            const Flags f = withImports(fx);
            TrainingConfig c = buildConfig(f, false);
            // Adapters with no targets given: the model's own Linears, which needs the model.
            if (c.finetune != FineTune::Full && f.loraTargets.empty())
                c.lora.targets = defaultLoraTargets(resolveModelFlag(f.model, "--model"));
            std::vector<std::string> notes;
            const std::string text = exportTrainingConfig(format, modelNameForExport(f.model), c, &notes);
            for (const auto &n : notes)
                cli::say(stderr, "headroom-cli: note: ", n);
            if (exportOut.empty())
                std::fputs(text.c_str(), stdout);
            else
                writeFileAtomically(exportOut, text, "--out"); // headroom/files.h: mkstemp, no FIFO or device replaced
            return 0;
        }
        if (*models) {
            nlohmann::json j = nlohmann::json::array();
            if (!modelsJson)
                std::printf("%-*s %-30s %10s %6s %7s %8s\n", cli::presetIdWidth(), "id", "name", "params", "layers", "hidden", "vocab");
            for (const auto &m : modelPresets()) {
                if (modelsJson)
                    j.push_back(toJson(m));
                else
                    std::printf("%-*s %-30s %9.2fB %6lld %7lld %8lld\n", cli::presetIdWidth(), m.id.c_str(), m.name.c_str(),
                                checkpointParameterCount(m) / 1e9, static_cast<long long>(m.numLayers),
                                static_cast<long long>(m.hiddenSize), static_cast<long long>(m.vocabSize));
            }
            if (modelsJson)
                std::printf("%s\n", j.dump(2).c_str());
            return 0;
        }
        if (*gpus) {
            nlohmann::json j = nlohmann::json::array();
            for (const auto &g : gpuCatalog()) {
                if (gpusJson)
                    j.push_back({{"id", g.id}, {"name", g.name}, {"memory_bytes", g.memoryBytes}, {"arch", g.arch}});
                else
                    std::printf("%-15s %-34s %s\n", g.id.c_str(), g.name.c_str(), human(g.memoryBytes).c_str());
            }
            if (gpusJson)
                std::printf("%s\n", j.dump(2).c_str());
            return 0;
        }
        if (*tl) {
            const auto [m, c, gpu, reserve] = resolveBudget(ft, false);
            std::printf("%s\n", toJson(estimateTimeline(m, c, optionsFor(ft))).dump().c_str());
            return 0;
        }
        if (*est && !fromTrace.empty())
            return printTraced(readTracedRun(fromTrace), fromTrace, f, check);
        if (*est) {
            const Flags fe = withImports(f); // the files read once, their notes said once
            // A config.json of a type with no modelled row: traced with the user's own stack.
            std::error_code ec;
            if (std::filesystem::is_regular_file(fe.model, ec)) {
                const ModelArch probe = modelFromFileJsonLenient(readJsonFile(fe.model, "--model"), fe.model);
                // A row that does not model this configuration, which the real stack runs: traced too.
                TrainingConfig c = buildConfig(fe, false);
                std::optional<Refusal> unmodelled;
                if (probe.estimable) {
                    const auto r = estimateRefusal(probe, c);
                    if (r && traceAnswers(r->blocker))
                        unmodelled = r;
                }
                if (!probe.estimable || unmodelled) {
                    if (fe.loraTargets.empty() && !probe.estimable) // no row: PEFT's own "all-linear"
                        c.lora.targets = defaultLoraTargets(probe);
                    if (unmodelled)
                        cli::say(stderr, "headroom-cli: note: ",
                                 unmodelled->field + " = " + unmodelled->value + ": " + unmodelled->reason +
                                     "; traced with your own stack instead");
                    bool cached = false;
                    const TracedRun run = cli::traceForEstimate(probe, c, &cached);
                    if (cached)
                        cli::say(stderr, "headroom-cli: note: ",
                                 probe.modelType + ": the trace made earlier of this request with this stack "
                                                   "(interpreter; torch, transformers, peft versions) was reused");
                    return printTraced(run, fe.model, f, check);
                }
            }
            const auto [m, c, gpu, reserve] = resolveBudget(fe, false);
            const EstimatorOptions opt = optionsFor(fe);
            const Estimate e = estimate(m, c, opt);
            const Room room(m, c, gpu, reserve, opt); // searched once for the advice and the card's notes
            const auto recs = recommend(m, c, gpu, reserve, opt, &room);
            if (f.json) {
                nlohmann::json doc = estimateDocument(m, c, e, gpu, reserve, recs, opt, &room);
                if (!fe.importedFrom.empty())
                    doc["imported_from"] = fe.importedFrom;
                std::printf("%s\n", doc.dump(2).c_str());
            } else {
                if (!fe.importedFrom.empty())
                    std::printf("from %s\n", fe.importedFrom.c_str());
                printTable(m, c, e, gpu, reserve, recs, opt, &room);
            }
            if (check) {
                const Verdict v = judge(m, c, e, gpu, reserve, opt);
                if (v.fit == Fit::Tight)
                    std::fprintf(stderr, "headroom-cli: warning: tight on %s: %s of %s, inside the %.0f%% reserve\n",
                                 gpu.name.c_str(), human(v.neededBytes).c_str(), human(v.capacityBytes).c_str(),
                                 100.0 * reserve);
                if (v.fit == Fit::OOM) {
                    std::fprintf(stderr, "headroom-cli: out of memory on %s: needs %s of %s\n", gpu.name.c_str(),
                                 human(v.neededBytes).c_str(), human(v.capacityBytes).c_str());
                    std::fflush(stdout);
                    return 1;
                }
            }
            return 0;
        }
        if (*sw) {
            const auto [m, c, gpu, reserve] = resolveBudget(fs, true);
            const auto seqs = parseIntegerList("--seq", fs.seq, 1, 1 << 24);
            const auto batches = parseIntegerList("--batch", fs.batch, 1, 1 << 20);
            std::vector<bool> ckpt;
            const std::string k = fs.checkpointingList.empty() ? "off" : fs.checkpointingList;
            if (k == "both")
                ckpt = {false, true};
            else if (k == "on")
                ckpt = {true};
            else if (k == "off")
                ckpt = {false};
            else
                throw InputError("--grad-checkpointing", k, "must be on, off or both");
            if (fs.format != "markdown" && fs.format != "csv")
                throw InputError("--format", fs.format, "must be markdown or csv");
            const auto rows = sweep(m, c, gpu, seqs, batches, ckpt, reserve, {}, optionsFor(fs));
            std::printf("%s", (fs.format == "csv" ? sweepCsv(rows) : sweepMarkdown(rows)).c_str());
            return 0;
        }
        if (*mb || *ms) {
            const auto [m, c, gpu, reserve] = resolveBudget(*mb ? fb : fq, false);
            const EstimatorOptions opt = optionsFor(*mb ? fb : fq);
            if (seqMultiple < 1 || seqMultiple > (1 << 20))
                throw InputError("--multiple-of", std::to_string(seqMultiple), "must be in [1, 1048576]");
            const int64_t n = *mb ? maxMicroBatch(m, c, gpu, reserve, opt) : maxSeqLen(m, c, gpu, reserve, opt, seqMultiple);
            if (n == 0) {
                std::printf("none: even %s 1 does not fit %s with a %.0f%% reserve\n", *mb ? "batch" : "seq",
                            gpu.name.c_str(), 100 * reserve);
                return 0;
            }
            std::printf("%lld\n", static_cast<long long>(n));
            return 0;
        }
    } catch (const InputError &e) {
        cli::say(stderr, "headroom-cli: error: ", e.what());
        return 2;
    } catch (const std::exception &e) {
        cli::say(stderr, "headroom-cli: error: ", e.what());
        return 2;
    }
    return 0;
}

// Everything goes to stdout through stdio: a full disk or a closed pipe must not end in exit 0
// with the output lost (issue 15: `headroom-cli estimate > /dev/full` exited 0).
int main(int argc, char **argv)
{
    const int rc = runCli(argc, argv);
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "headroom-cli: error: stdout: the output could not be written (%s)\n", std::strerror(errno));
        return 2;
    }
    return rc;
}
