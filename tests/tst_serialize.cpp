// Versioned formats round-trip, and bad documents are refused with the field named.
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"

#include <QtTest>

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
    void requestRoundTrips()
    {
        ProbeRequest r;
        r.model = findModelPreset("qwen2.5-0.5b");
        r.steps = 3;
        r.device = "cpu";
        const json j = toJson(r);
        QCOMPARE(toJson(probeRequestFromJson(j)), j);
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
