// Golden outputs: a fixed grid of configurations over every preset's family, with what the CLI's
// `estimate --json` prints for each (estimate, verdict, recommendations, card notes), the
// solvers, the estimated timeline, the budget sheets (JSON, Markdown, CSV, HTML), sweeps, and the
// estimate of every corpus run. Each output is held to the digest committed in
// tests/data/golden/outputs.tsv, so a restructure that is meant to change nothing provably
// changes nothing (issue 25). An output that is meant to change is regenerated deliberately:
//   HEADROOM_GOLDEN_WRITE=1 build/dev/tests/tst_golden      (rewrites outputs.tsv)
//   HEADROOM_GOLDEN_DUMP=DIR build/dev/tests/tst_golden     (every output as a file, to diff two builds)
// On a mismatch the new digests are written next to the golden file as outputs.tsv.actual.
#include "headroom/files.h"
#include "headroom/budget.h"
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/estimator.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"
#include "headroom/sheet.h"

#include "corpusplan.h"

#include <QtTest>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

using namespace headroom;
using nlohmann::json;

namespace {


// A small deterministic generator (the grid must be the same on every machine and every run).
struct Lcg
{
    uint64_t s;
    uint64_t next()
    {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return s >> 33;
    }
    template<typename T> const T &pick(const std::vector<T> &v) { return v[next() % v.size()]; }
};

struct Output
{
    std::string key;
    std::string text;
};

std::string errorText(const std::exception &e)
{
    return std::string("error: ") + e.what();
}

// One configuration: the CLI's estimate document, and for some the solvers, timeline and sheets.
void emitConfiguration(const std::string &key, const Scenario &s, size_t index, std::vector<Output> &out)
{
    std::string doc;
    try {
        const EstimatorOptions opt = estimatorOptions(s);
        const Estimate e = estimate(s.model, s.config, opt);
        // The advice (each recommendation an estimate of its own, with the max-batch solver) is
        // most of a configuration's time: every fourth configuration carries it, 130 of the grid,
        // every model among them (the whole test: 258 -> 176 CPU seconds on the 2-core VM).
        const Room room(s.model, s.config, s.gpu, s.reserve, opt); // as the CLI: one search for the advice and the notes
        const auto recs = index % 4 == 0 ? recommend(s.model, s.config, s.gpu, s.reserve, opt, &room)
                                         : std::vector<Recommendation>{};
        doc = estimateDocument(s.model, s.config, e, s.gpu, s.reserve, recs, opt, &room).dump(1);
        if (index % 10 == 3) {
            std::ostringstream sol;
            sol << "max_batch " << maxMicroBatch(s.model, s.config, s.gpu, s.reserve, opt) << "\nmax_seq "
                << maxSeqLen(s.model, s.config, s.gpu, s.reserve, opt, 128) << "\n";
            out.push_back({key + "/solve", sol.str()});
        }
        if (index % 10 == 6)
            out.push_back({key + "/timeline", toJson(estimateTimeline(s.model, s.config, opt)).dump()});
    } catch (const InputError &e) {
        doc = errorText(e);
        if (auto fix = quickFix(s.model, s.config, e))
            doc += "\nfix: " + fix->title + "\n" + toJson(fix->config).dump();
    }
    out.push_back({key + "/estimate", doc});
    if (index % 7 == 2) {
        Sheet sheet;
        sheet.scenario = s;
        sheet.createdAt = "2026-01-01T00:00:00Z";
        sheet.units = index % 2 ? Unit::GB : Unit::GiB;
        try {
            out.push_back({key + "/sheet.json", toJson(sheet).dump(1)});
            out.push_back({key + "/sheet.md", sheetMarkdown(sheet)});
            out.push_back({key + "/sheet.csv", sheetCsv(sheet)});
            out.push_back({key + "/sheet.html", sheetHtml(sheet)});
        } catch (const std::exception &e) {
            out.push_back({key + "/sheet", errorText(e)});
        }
    }
}

using Job = std::function<std::vector<Output>()>;

std::vector<Job> gridJobs(size_t stride)
{
    const std::vector<std::string> models = {"llama-3.2-1b",     "llama-3.1-8b", "llama-3.1-70b", "llama-2-7b",
                                             "mistral-7b",       "mixtral-8x7b", "qwen2.5-0.5b",  "qwen2.5-7b",
                                             "qwen3-0.6b",       "qwen3-8b",     "qwen3-30b-a3b", "qwen1.5-moe-a2.7b",
                                             "gemma-2b",         "gemma-2-2b",   "gemma-3-1b",    "gemma-3-4b",
                                             "phi-3-mini",       "phi-4-mini",   "gpt2",          "pythia-410m",
                                             "olmo-2-1b",        "olmo-3-7b",    "starcoder2-3b", "deepseek-v2-lite",
                                             "moonlight-16b-a3b"};
    const std::vector<std::string> gpus = {"h100-80", "a100-40", "rtx-4090", "h200", "l40s"};
    const std::vector<std::string> allocConfs = {
        "", "", "", "expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.6"};
    std::vector<Job> jobs;
    size_t index = 0;
    for (const auto &id : models) {
        const ModelArch m = findModelPreset(id);
        Lcg g{fnv1a64(id)};
        for (int k = 0; k < 21; ++k, ++index) {
            // Every configuration is drawn, run or not, so that a stride runs the same ones.
            Scenario s;
            s.model = m;
            TrainingConfig &c = s.config;
            c.finetune = g.pick(std::vector<FineTune>{FineTune::Full, FineTune::LoRA, FineTune::LoRA, FineTune::QLoRA});
            c.precision = g.pick(std::vector<Precision>{Precision::BF16, Precision::BF16, Precision::AmpBF16,
                                                        Precision::FP32, Precision::FP16});
            c.optimizer = g.pick(std::vector<Optimizer>{Optimizer::AdamW, Optimizer::AdamW, Optimizer::AdamW8bit,
                                                        Optimizer::PagedAdamW8bit, Optimizer::SGD,
                                                        Optimizer::SGDMomentum, Optimizer::Adafactor, Optimizer::Lion});
            c.optimizerImpl = g.pick(std::vector<OptimizerImpl>{OptimizerImpl::Foreach, OptimizerImpl::Foreach,
                                                                OptimizerImpl::Fused, OptimizerImpl::ForLoop});
            c.lora.rank = g.pick(std::vector<int>{8, 16, 64});
            c.lora.alpha = 2.0 * c.lora.rank;
            if (g.next() % 4 == 0)
                c.lora.targets = {"q_proj", "v_proj"};
            c.microBatch = g.pick(std::vector<int64_t>{1, 2, 4, 8});
            c.seqLen = seqLenFor(m, g.pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096}));
            c.gradAccum = g.pick(std::vector<int64_t>{1, 1, 2, 4});
            c.gradCheckpointing = g.next() % 2;
            if (c.gradCheckpointing && g.next() % 3 == 0)
                c.checkpointLayers = 2;
            c.attention = g.next() % 5 == 0 ? Attention::Eager : Attention::SDPA;
            c.loss = g.next() % 4 == 0 ? Loss::Fused : Loss::Standard;
            const uint64_t par = g.next() % 8;
            if (par >= 5) {
                c.worldSize = g.pick(std::vector<int>{2, 8});
                c.zeroStage = static_cast<int>(par - 5 + (par == 7 ? 1 : 0)); // 0, 1, 3
            }
            c.offloadOptimizer = g.next() % 12 == 0;
            c.activationOffload = g.next() % 12 == 0;
            s.gpu = findGpu(g.pick(gpus));
            s.reserve = g.pick(std::vector<double>{0.10, 0.15, 0.05});
            s.allocConf = g.pick(allocConfs);
            if (index % stride)
                continue;
            jobs.push_back([key = "grid/" + id + "/" + std::to_string(k), s, index] {
                std::vector<Output> out;
                emitConfiguration(key, s, index, out);
                return out;
            });
        }
        if (index % (stride * 3) == 0) {
            jobs.push_back([m, id] {
                TrainingConfig base;
                base.finetune = FineTune::LoRA;
                std::string text;
                try {
                    const auto rows = sweep(m, base, findGpu("h100-80"), {512, 1024}, {1, 4}, {false, true});
                    text = sweepMarkdown(rows) + sweepCsv(rows);
                } catch (const InputError &e) {
                    text = errorText(e);
                }
                return std::vector<Output>{{"sweep/" + id, text}};
            });
        }
    }
    return jobs;
}

// The estimate of each corpus run's configuration, as tst_accuracy compares it.
std::vector<Job> corpusJobs(size_t stride)
{
    std::map<std::string, std::string> conf = corpusAllocConfs();
    std::vector<Job> jobs;
    std::ifstream in(HEADROOM_SOURCE_DIR "/tests/data/corpus/h200.jsonl");
    std::string line;
    size_t index = 0;
    while (std::getline(in, line)) {
        const json r = json::parse(line);
        if (!r.at("result").is_object() || r.at("result").value("event", "") != "result")
            continue;
        if (index++ % stride)
            continue;
        const std::string name = r.at("name").get<std::string>();
        jobs.push_back([name, result = r.at("result"), allocConf = conf.count(name) ? conf[name] : std::string()] {
            std::string text;
            try {
                const Measurement m = measurementFromJson(result);
                EstimatorOptions o;
                if (!allocConf.empty())
                    o.allocator = parseAllocConf(allocConf);
                o.glooCollectives = m.backend == "gloo";
                text = toJson(estimate(m.model, m.config, o)).dump(1);
            } catch (const InputError &e) {
                text = errorText(e);
            }
            return std::vector<Output>{{"corpus/" + name, text}};
        });
    }
    return jobs;
}

// Every job on every core, the outputs in the jobs' order.
std::vector<Output> runJobs(const std::vector<Job> &jobs)
{
    std::vector<std::vector<Output>> results(jobs.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
        workers.emplace_back([&] {
            for (size_t i; (i = next++) < jobs.size();)
                results[i] = jobs[i]();
        });
    for (auto &w : workers)
        w.join();
    std::vector<Output> out;
    for (auto &r : results)
        out.insert(out.end(), r.begin(), r.end());
    return out;
}

std::string digests(const std::vector<Output> &outputs)
{
    std::string s;
    char hex[17];
    for (const auto &o : outputs) {
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(o.text)));
        s += o.key + "\t" + hex + "\n";
    }
    return s;
}

} // namespace

class TestGolden : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void outputsAreUnchanged()
    {
        // Sanitizer builds run a share of the grid (every stride-th configuration) in time.
        const size_t stride = std::max(1, qEnvironmentVariableIntValue("HEADROOM_GOLDEN_STRIDE"));
        std::vector<Job> jobs = gridJobs(stride);
        const auto corpus = corpusJobs(stride);
        jobs.insert(jobs.end(), corpus.begin(), corpus.end());
        const std::vector<Output> outputs = runJobs(jobs);
        size_t grid = 0;
        for (const auto &o : outputs)
            grid += o.key.rfind("grid/", 0) == 0 && o.key.size() > 9 && o.key.substr(o.key.size() - 9) == "/estimate";
        if (stride == 1)
            QVERIFY2(grid >= 500, "the grid holds at least 500 configurations");

        const std::string dump = qEnvironmentVariable("HEADROOM_GOLDEN_DUMP").toStdString();
        if (!dump.empty())
            for (const auto &o : outputs) {
                const std::filesystem::path p = std::filesystem::path(dump) / o.key;
                std::filesystem::create_directories(p.parent_path());
                std::ofstream(p) << o.text;
            }

        const std::string path = HEADROOM_SOURCE_DIR "/tests/data/golden/outputs.tsv";
        const std::string actual = digests(outputs);
        if (qEnvironmentVariableIsSet("HEADROOM_GOLDEN_WRITE")) {
            QVERIFY2(stride == 1, "write the golden digests from the whole grid");
            std::ofstream(path, std::ios::binary) << actual;
            return;
        }
        std::map<std::string, std::string> golden;
        {
            std::ifstream in(path);
            std::string line;
            while (std::getline(in, line))
                if (auto tab = line.find('\t'); tab != std::string::npos)
                    golden[line.substr(0, tab)] = line.substr(tab + 1);
        }
        QVERIFY2(!golden.empty(), "tests/data/golden/outputs.tsv is missing");
        std::string changed;
        int count = 0;
        std::istringstream lines(actual);
        std::string line;
        while (std::getline(lines, line)) {
            const auto tab = line.find('\t');
            const std::string key = line.substr(0, tab);
            auto it = golden.find(key);
            if (it == golden.end() || it->second != line.substr(tab + 1)) {
                if (++count <= 10)
                    changed += "\n  " + key + (it == golden.end() ? " (new)" : "");
            }
        }
        if (stride == 1 && golden.size() != outputs.size())
            changed +=
                "\n  " + std::to_string(golden.size()) + " golden outputs, " + std::to_string(outputs.size()) + " now";
        if (!changed.empty()) {
            std::ofstream(path + ".actual", std::ios::binary) << actual;
            QFAIL(qPrintable(QStringLiteral("%1 outputs differ from tests/data/golden/outputs.tsv (new digests in "
                                            "outputs.tsv.actual; HEADROOM_GOLDEN_DUMP=DIR writes them to diff):%2")
                                 .arg(count)
                                 .arg(QString::fromStdString(changed))));
        }
        std::printf("%zu outputs identical (%zu grid configurations, stride %zu)\n", outputs.size(), grid, stride);
    }
};

QTEST_GUILESS_MAIN(TestGolden)
#include "tst_golden.moc"
