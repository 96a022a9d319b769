// Versioned formats round-trip, and bad documents are refused with the field named.
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"
#include "headroom/sheet.h"

#include <QtTest>

#include <fstream>

using namespace headroom;
using nlohmann::json;

namespace {
Measurement sample()
{
    Measurement m;
    m.device = "cuda";
    m.deviceName = "NVIDIA H200";
    m.torchVersion = "2.11.0";
    m.model = findModelPreset("llama-3.2-1b");
    m.config.finetune = FineTune::LoRA;
    m.config.lora.targets = {"q_proj", "v_proj"};
    for (int step = 0; step < 2; ++step)
        for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
            PhaseMeasurement pm;
            pm.step = step;
            pm.phase = p;
            pm.peakAllocatedBytes = 1000 + step * 10 + int(p);
            pm.peakReservedBytes = 2000;
            pm.allocatedBytes = 900;
            pm.reservedBytes = 2000;
            m.phases.push_back(pm);
        }
    m.peakAllocatedBytes = 1012;
    m.peakReservedBytes = 2000;
    m.attribution[Category::Weights] = 500;
    OomReport oom;
    oom.phase = Phase::Backward;
    oom.requestedBytes = 123;
    m.oom = oom;
    return m;
}
} // namespace

class TestSerialize : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    // The LibTorch probe's attribution of its peak (core: attributePeak), Torch-free.
    void probePeakAttribution()
    {
        PeakAccounts a;
        a.weightBytes = 1000;
        a.optimizerStateBytes = 2000;
        a.gradientBytes = 1000;
        a.residentBytes = 3100; // weights + state + 100 of workspaces
        a.keptAfterForwardBytes = 900;
        a.logprobBytes = 400;
        // Forward peak: what the forward kept beyond the log-probabilities is activations; the
        // rest above the resident bytes is logits; the remainder (workspaces) temporaries.
        Breakdown f = attributePeak(a, 4500, Phase::Forward);
        QCOMPARE(f[Category::Activations], int64_t(500));
        QCOMPARE(f[Category::Logits], int64_t(900));
        QCOMPARE(f[Category::Gradients], int64_t(0));
        QCOMPARE(f.total(), int64_t(4500));
        // Optimizer peak: every gradient is live.
        Breakdown o = attributePeak(a, 4300, Phase::Optimizer);
        QCOMPARE(o[Category::Gradients], int64_t(1000));
        QCOMPARE(o[Category::Activations], int64_t(0));
        QCOMPARE(o[Category::Temporaries], int64_t(300));
        // A backward peak no higher than the gradients plus a quarter of the activations came at
        // the end of backward; a higher one in the middle, with the activations.
        QCOMPARE(attributePeak(a, 3100 + 1100, Phase::Backward)[Category::Gradients], int64_t(1000));
        QCOMPARE(attributePeak(a, 3100 + 1500, Phase::Backward)[Category::Gradients], int64_t(0));
        // Never negative: a peak below what is named leaves no temporaries.
        QCOMPARE(attributePeak(a, 100, Phase::Forward)[Category::Temporaries], int64_t(0));
        QCOMPARE(attributePeak(a, 100, Phase::Forward)[Category::Logits], int64_t(0));
    }

    // The optimizer table (types.cpp) has one row per enumerator, and its names, labels and
    // Hugging Face names are what the CLI, the explorer and the config formats use.
    void optimizerTableCoversEveryOptimizer()
    {
        const Optimizer all[] = {Optimizer::AdamW, Optimizer::AdamW8bit, Optimizer::PagedAdamW8bit, Optimizer::SGD,
                                 Optimizer::SGDMomentum, Optimizer::Adafactor, Optimizer::Lion};
        QCOMPARE(optimizerTable().size(), std::size(all));
        for (Optimizer o : all) {
            const OptimizerTraits &t = traits(o);
            QCOMPARE(int(t.id), int(o));
            QCOMPARE(int(parseOptimizer(toString(o))), int(o));
            QVERIFY(!t.label.empty() && !t.help.empty() && !t.hfOptim.empty());
        }
        QVERIFY_THROWS_EXCEPTION(InputError, parseOptimizer("adam-9bit"));
    }

    void trainingConfigRoundTrips()
    {
        TrainingConfig c;
        c.precision = Precision::AmpBF16;
        c.optimizer = Optimizer::Adafactor;
        c.finetune = FineTune::QLoRA;
        c.lora.rank = 64;
        c.lora.targets = {"q_proj"};
        c.microBatch = 3;
        c.seqLen = 777;
        c.worldSize = 4;
        c.zeroStage = 2;
        const json j = toJson(c);
        QCOMPARE(toJson(trainingConfigFromJson(j)), j);
    }
    void measurementRoundTrips()
    {
        const json j = toJson(sample());
        const Measurement back = measurementFromJson(j);
        QCOMPARE(toJson(back), j);
        QCOMPARE(back.steady(Phase::Forward)->peakAllocatedBytes, int64_t(1011));
        QVERIFY(back.oom.has_value());
    }
    // A real two-rank run (headroom-probe --nproc 2, CPU, Gloo), taken apart into what each rank
    // reported, and put back together by the launcher's merge.
    void ranksMergeIntoTheBusiestCard()
    {
        std::ifstream in(QFINDTESTDATA("data/cpu/tiny-zero3-2ranks.result.json").toStdString());
        const Measurement run = measurementFromJson(json::parse(in));
        QCOMPARE(run.ranks.size(), size_t(2));
        QCOMPARE(QString::fromStdString(run.backend), QStringLiteral("gloo"));
        QCOMPARE(rankSpread(run), 1.0);
        std::vector<Measurement> own(2, run);
        own[0].ranks = {run.ranks[0]};
        own[1].ranks = {run.ranks[1]};
        own[1].ranks[0].peakAllocatedBytes = run.ranks[0].peakAllocatedBytes * 105 / 100; // a busier card
        own[1].peakAllocatedBytes = own[1].ranks[0].peakAllocatedBytes;
        const Measurement merged = mergeRanks({own[1], own[0]}); // in any order
        QCOMPARE(merged.ranks.size(), size_t(2));
        QCOMPARE(merged.ranks[0].rank, 0);
        QCOMPARE(merged.peakAllocatedBytes, own[1].peakAllocatedBytes); // the busiest card speaks
        QVERIFY(std::abs(rankSpread(merged) - 1.05) < 1e-6);
        const json j = toJson(merged);
        QCOMPARE(j.at("uneven").get<bool>(), true);
        QCOMPARE(toJson(measurementFromJson(j)), j);
        // Not one run: a rank twice, a rank missing, another configuration, nothing at all.
        auto refused = [](std::vector<Measurement> v, const char *field) {
            try {
                mergeRanks(std::move(v));
            } catch (const InputError &e) {
                return e.field() == field;
            }
            return false;
        };
        QVERIFY(refused({own[0], own[0]}, "ranks[1].rank"));
        QVERIFY(refused({own[1]}, "ranks[0].rank"));
        Measurement other = own[1];
        other.config.seqLen *= 2;
        QVERIFY(refused({own[0], other}, "ranks[1].config"));
        QVERIFY(refused({}, "ranks"));
        Measurement whole = run; // a merged result is not one rank's own
        QVERIFY(refused({whole}, "ranks[0].ranks"));
    }
    void requestRoundTrips()
    {
        ProbeRequest r;
        r.model = findModelPreset("qwen2.5-0.5b");
        r.steps = 3;
        r.device = "cpu";
        r.earlyStop = false;
        const json j = toJson(r);
        QCOMPARE(toJson(probeRequestFromJson(j)), j);
        QVERIFY(!probeRequestFromJson(j).earlyStop);
        json older = j; // a request from before early_stop: the probe may stop early
        older.erase("early_stop");
        QVERIFY(probeRequestFromJson(older).earlyStop);
        json bad = j;
        bad["early_stop"] = "sometimes";
        try {
            probeRequestFromJson(bad);
            QFAIL("accepted early_stop = sometimes");
        } catch (const InputError &e) {
            QCOMPARE(QString::fromStdString(e.field()), QStringLiteral("request.early_stop"));
        }
    }
    void badMeasurementNamesField_data()
    {
        QTest::addColumn<QString>("patch"); // a JSON merge patch applied to a good result
        QTest::addColumn<QString>("mentions");
        QTest::addRow("schema") << R"({"schema_version": 99})" << "result.schema_version = 99";
        QTest::addRow("device") << R"({"device": "tpu"})" << "result.device = tpu";
        QTest::addRow("phases type") << R"({"phases": 7})" << "result.phases";
        QTest::addRow("negative bytes") << R"({"peak": {"allocated_bytes": -5}})" << "result.peak.allocated_bytes = -5";
        QTest::addRow("absurd bytes") << R"({"peak": {"allocated_bytes": 9000000000000000000}})"
                                      << "result.peak.allocated_bytes";
        QTest::addRow("bad precision") << R"({"config": {"precision": "fp8"}})" << "config.precision = fp8";
        QTest::addRow("bad category") << R"({"attribution": {"vram": 5}})" << "result.attribution = vram";
        QTest::addRow("missing model") << R"({"model": null})" << "model";
        QTest::addRow("backend") << R"({"backend": "mpi"})" << "result.backend = mpi";
        QTest::addRow("skipped steps") << R"({"skipped_steps": -1})" << "result.skipped_steps = -1";
        QTest::addRow("phase attribution type") << R"({"phase_attribution": 3})" << "result.phase_attribution";
        QTest::addRow("phase attribution phase") << R"({"phase_attribution": {"sideways": {"weights": 1}}})"
                                                 << "result.phase_attribution = sideways";
        QTest::addRow("phase attribution load") << R"({"phase_attribution": {"after_load": {"weights": 1}}})"
                                                << "result.phase_attribution = after_load";
        QTest::addRow("phase attribution bytes") << R"({"phase_attribution": {"forward": {"weights": -1}}})"
                                                 << "result.phase_attribution.forward";
        QTest::addRow("ranks type") << R"({"ranks": 5})" << "result.ranks = 5";
        const char *rank = R"({"rank": %1, "peak_allocated_bytes": %2, "peak_reserved_bytes": 10, "peak_phase": "%3"})";
        QTest::addRow("rank bytes") << QStringLiteral("{\"ranks\": [%1]}").arg(QString::fromLatin1(rank).arg(0).arg(-1).arg(QStringLiteral("forward")))
                                    << "result.ranks[0].peak_allocated_bytes = -1";
        QTest::addRow("rank phase") << QStringLiteral("{\"ranks\": [%1]}").arg(QString::fromLatin1(rank).arg(0).arg(5).arg(QStringLiteral("lunch")))
                                    << "result.ranks[0].peak_phase";
        QTest::addRow("rank order") << QStringLiteral("{\"ranks\": [%1, %2]}")
                                           .arg(QString::fromLatin1(rank).arg(1).arg(5).arg(QStringLiteral("forward")),
                                                QString::fromLatin1(rank).arg(0).arg(5).arg(QStringLiteral("forward")))
                                    << "result.ranks[1].rank = 0";
    }
    void badMeasurementNamesField()
    {
        QFETCH(QString, patch);
        QFETCH(QString, mentions);
        json j = toJson(sample());
        j.merge_patch(json::parse(patch.toStdString()));
        try {
            measurementFromJson(j);
            QFAIL("expected InputError");
        } catch (const InputError &e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(mentions), e.what());
        }
    }
    // Issue 31: the settings a comparison lists, read off the sheet's JSON of each scenario.
    void scenarioDiffListsWhatChanged()
    {
        const Scenario a = defaultScenario(); // LoRA r16, b4 x 2048, H100
        QVERIFY(diffScenarios(a, a).empty());
        Scenario b = a;
        b.config.lora.rank = 64;
        b.config.loss = Loss::Fused; // a setting written only when set: still compared
        b.gpu = findGpu("h200");
        b.reserve = 0.15;
        const auto d = diffScenarios(a, b);
        QCOMPARE(d.size(), size_t(4));
        QCOMPARE(d[0].setting, std::string("lora.rank"));
        QCOMPARE(d[0].pinned, std::string("16"));
        QCOMPARE(d[0].current, std::string("64"));
        QCOMPARE(d[1].setting, std::string("loss"));
        QCOMPARE(d[1].pinned, std::string("standard"));
        QCOMPARE(d[1].current, std::string("fused"));
        QCOMPARE(d[2].setting, std::string("gpu"));
        QVERIFY(d[2].current.find("H200") != std::string::npos);
        QCOMPARE(d[3].setting, std::string("reserve"));
        QCOMPARE(d[3].current, std::string("15%"));
        // another model is one change, not its every field
        Scenario c = a;
        c.model = findModelPreset("qwen2.5-7b");
        const auto dm = diffScenarios(a, c);
        QVERIFY(!dm.empty());
        QCOMPARE(dm[0].setting, std::string("model"));
        QVERIFY(dm[0].current.find("qwen2.5-7b") != std::string::npos);
        QVERIFY(std::none_of(dm.begin(), dm.end(), [](const ScenarioChange &x) { return x.setting.rfind("model.", 0) == 0; }));
        // full fine-tuning on both sides: LoRA's settings do not count
        Scenario f1 = a, f2 = a;
        f1.config.finetune = f2.config.finetune = FineTune::Full;
        f2.config.lora.rank = 8;
        QVERIFY(diffScenarios(f1, f2).empty());
        f2.config.lora.targets = {"q_proj"};
        QVERIFY(diffScenarios(f1, f2).empty());
        QCOMPARE(signedBytes(0, Unit::GiB), std::string("0"));
        QCOMPARE(signedBytes(int64_t(3) << 29, Unit::GiB), std::string("+1.50 GiB"));
        QCOMPARE(signedBytes(-(int64_t(1) << 30), Unit::GiB), std::string("-1.00 GiB"));
    }

    void estimateDocumentHasTheContract()
    {
        const auto &m = findModelPreset("llama-3.1-8b");
        TrainingConfig c;
        const Estimate e = estimate(m, c);
        const json d = estimateDocument(m, c, e, findGpu("h100-80"), 0.1, {});
        for (const char *k : {"schema_version", "peak", "breakdown", "phases", "verdict"})
            QVERIFY2(d.contains(k), k);
        for (const char *k : {"allocated_bytes", "reserved_bytes", "device_total_bytes"})
            QVERIFY2(d.at("peak").contains(k), k);
        QCOMPARE(d.at("phases").size(), size_t(4));
        int64_t sum = 0;
        for (const auto &[k, v] : d.at("breakdown").items())
            sum += v.get<int64_t>();
        QCOMPARE(sum, e.deviceTotalBytes);
    }
};

QTEST_GUILESS_MAIN(TestSerialize)
#include "tst_serialize.moc"
