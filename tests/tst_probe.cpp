// headroom-probe end to end in CPU mode: the real executable, real request files, tiny models.
#include "headroom/catalog.h"
#include "headroom/estimator.h"
#include "headroom/measurement.h"

#include <QtTest>

#include <csignal>

using namespace headroom;
using nlohmann::json;

namespace {

ModelArch tiny()
{
    ModelArch m;
    m.id = "tiny";
    m.name = "tiny llama";
    m.modelType = "llama";
    m.hiddenSize = 64;
    m.numLayers = 2;
    m.numHeads = 4;
    m.numKvHeads = 2;
    m.headDim = 16;
    m.intermediateSize = 128;
    m.vocabSize = 256;
    m.maxPositions = 512;
    return m;
}

struct ProbeRun
{
    int code = -1;
    std::vector<json> events;
    QString err;
};

// A request file that lives as long as the returned object.
std::unique_ptr<QTemporaryFile> requestFile(const json &request)
{
    auto f = std::make_unique<QTemporaryFile>();
    f->open();
    f->write(QByteArray::fromStdString(request.dump()));
    f->flush();
    return f;
}

ProbeRun runProbe(const ProbeRequest &req, const QStringList &extra = {})
{
    const auto f = requestFile(toJson(req));
    QProcess p;
    p.start(QStringLiteral(HEADROOM_PROBE),
            QStringList{QStringLiteral("--request"), f->fileName(), QStringLiteral("--device"), QStringLiteral("cpu")}
                << extra);
    p.waitForFinished(120000);
    ProbeRun r;
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.err = QString::fromUtf8(p.readAllStandardError());
    for (const QByteArray &line : p.readAllStandardOutput().split('\n'))
        if (!line.trimmed().isEmpty())
            r.events.push_back(json::parse(line.toStdString()));
    return r;
}

Measurement resultOf(const ProbeRun &r)
{
    if (r.events.empty() || r.events.back().value("event", "") != "result")
        throw std::runtime_error("no result: " + r.err.toStdString());
    return measurementFromJson(r.events.back());
}

ProbeRequest request(FineTune ft = FineTune::Full, bool ckpt = false)
{
    ProbeRequest r;
    r.model = tiny();
    r.config.precision = Precision::FP32;
    r.config.finetune = ft;
    r.config.microBatch = 2;
    r.config.seqLen = 64;
    r.config.gradCheckpointing = ckpt;
    r.device = "cpu";
    return r;
}

// Big enough that a signal arrives mid-run.
ProbeRequest longRun(ProbeRequest r)
{
    r.model.hiddenSize = 256;
    r.model.intermediateSize = 1024;
    r.model.numLayers = 8;
    r.config.seqLen = 512;
    r.steps = 1000;
    return r;
}

// The process ids of a process's children (pgrep -P).
QStringList childrenOf(pid_t parent)
{
    QProcess ps;
    ps.start(QStringLiteral("pgrep"), {QStringLiteral("-P"), QString::number(parent)});
    ps.waitForFinished(5000);
    return QString::fromUtf8(ps.readAllStandardOutput()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
}

// Until a child's SIGTERM handler is in (/proc/PID/status SigCgt): loading LibTorch takes a while
// on a busy machine, and a signal before that meets the default action, not the code under test.
// The highest "step" of the progress events in a probe's output (-1: none).
int lastStep(const QByteArray &out)
{
    int last = -1;
    for (const QByteArray &line : out.split('\n')) {
        const auto j = nlohmann::json::parse(line.toStdString(), nullptr, false);
        if (j.is_object() && j.value("event", std::string()) == "progress" && j.contains("step") &&
            j["step"].is_number_integer())
            last = std::max(last, j["step"].get<int>());
    }
    return last;
}

bool catchesSigterm(const QProcess &p)
{
    QFile f(QStringLiteral("/proc/%1/status").arg(p.processId()));
    if (!f.open(QIODevice::ReadOnly))
        return false;
    for (const QByteArray &line : f.readAll().split('\n'))
        if (line.startsWith("SigCgt:"))
            return ((line.mid(7).trimmed().toULongLong(nullptr, 16) >> (SIGTERM - 1)) & 1) != 0;
    return false;
}

int64_t steadyPeak(const Measurement &m, Phase p)
{
    const auto s = m.steady(p);
    return s ? s->peakAllocatedBytes : 0;
}

ProbeRequest dataParallel(int zero, bool ckpt, int ranks = 2)
{
    ProbeRequest r = request(FineTune::Full, ckpt);
    r.config.worldSize = ranks;
    r.config.zeroStage = zero;
    return r;
}

} // namespace

class TestProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void phasesArriveInOrder()
    {
        const ProbeRun r = runProbe(request());
        QCOMPARE(r.code, 0);
        std::vector<std::pair<int, std::string>> seen;
        for (const auto &e : r.events)
            if (e.at("event") == "progress" && e.at("fraction").get<double>() < 1.0)
                seen.emplace_back(e.at("step").get<int>(), e.at("phase").get<std::string>());
        QCOMPARE(seen.size(), size_t(9)); // 1 warm-up + 2 measured steps x 3 phases
        const char *names[] = {"forward", "backward", "optimizer"};
        for (size_t i = 0; i < seen.size(); ++i) {
            QCOMPARE(seen[i].first, int(i / 3));
            QCOMPARE(QString::fromStdString(seen[i].second), QString::fromLatin1(names[i % 3]));
        }
        const Measurement m = resultOf(r);
        QCOMPARE(QString::fromStdString(m.device), QStringLiteral("cpu"));
        QVERIFY(m.steady(Phase::Backward).has_value());
        QVERIFY(m.peakAllocatedBytes > 0);
    }
    void weightsAreExactParameterBytes()
    {
        const Measurement m = resultOf(runProbe(request()));
        QCOMPARE(m.attribution[Category::Weights], parameterCount(tiny()) * 4);
        // AdamW: two fp32 moments per parameter, plus one fp32 step scalar per parameter tensor.
        int64_t tensors = 0;
        for (const auto &t : parameterInventory(tiny()))
            tensors += t.count;
        QCOMPARE(m.attribution[Category::OptimizerState], parameterCount(tiny()) * 4 * 2 + 4 * tensors);
        // Each steady phase attributed at its own peak (the explorer's per-phase measured bars).
        for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
            const auto &b = m.phaseAttribution[static_cast<size_t>(p)];
            QVERIFY2(b.has_value(), toString(p).data());
            QCOMPARE(b->allocated(), m.steady(p)->peakAllocatedBytes);
            QCOMPARE((*b)[Category::Weights], parameterCount(tiny()) * 4);
        }
        QCOMPARE((*m.phaseAttribution[size_t(Phase::Optimizer)])[Category::Gradients], parameterCount(tiny()) * 4);
    }
    void loraTrainsOnlyAdapters()
    {
        const Measurement m = resultOf(runProbe(request(FineTune::LoRA)));
        const Estimate e = estimate(tiny(), request(FineTune::LoRA).config);
        // AdamW state for fp32 adapters only: two moments, plus one step scalar per adapter tensor.
        const int64_t adapterTensors = 2 * 7 * tiny().numLayers;
        QCOMPARE(m.attribution[Category::OptimizerState], 2 * 4 * e.params.trainable + 4 * adapterTensors);
        QCOMPARE(m.attribution[Category::Weights], e.params.weightBytes);
    }
    void checkpointingLowersForwardPeak()
    {
        ProbeRequest a = request(), b = request(FineTune::Full, true);
        a.config.seqLen = b.config.seqLen = 256;
        const auto off = resultOf(runProbe(a)).steady(Phase::Forward)->peakAllocatedBytes;
        const auto on = resultOf(runProbe(b)).steady(Phase::Forward)->peakAllocatedBytes;
        QVERIFY2(on < off, qPrintable(QStringLiteral("%1 vs %2").arg(on).arg(off)));
    }
    // QLoRA as PEFT prepares it: NF4 decoder Linears, everything else fp32 (the estimate's
    // weight bytes to the byte), and the 4-bit base smaller than bf16 LoRA's.
    void qloraWeightsAreNf4()
    {
        ProbeRequest r = request(FineTune::QLoRA);
        r.config.precision = Precision::BF16;
        const Measurement m = resultOf(runProbe(r));
        const Estimate e = estimate(tiny(), r.config);
        QCOMPARE(m.attribution[Category::Weights], e.params.weightBytes);
        QVERIFY(relativeError(e.peakAllocatedBytes, m.peakAllocatedBytes) > -0.02);
    }
    void badRequestsExitTwo_data()
    {
        QTest::addColumn<QString>("patch");
        QTest::addColumn<QString>("field");
        QTest::addRow("schema") << R"({"schema_version": 7})" << "request.schema_version";
        QTest::addRow("batch") << R"({"config": {"micro_batch": 0}})" << "config.micro_batch";
        QTest::addRow("precision") << R"({"config": {"precision": "fp4"}})" << "config.precision";
        QTest::addRow("hidden") << R"({"model": {"hidden_size": -1}})" << "model.hidden_size";
        QTest::addRow("device") << R"({"device": "tpu"})" << "request.device";
        QTest::addRow("targets") << R"({"config": {"finetune": "lora", "lora": {"targets": ["nope"]}}})"
                                 << "lora_targets";
        QTest::addRow("world size") << R"({"config": {"world_size": 65}})" << "config.world_size";
        // What the LibTorch engine does not reproduce goes to the transformers engine.
        QTest::addRow("zero") << R"({"config": {"world_size": 2, "zero_stage": 3}})" << "config.zero_stage";
        QTest::addRow("accumulation") << R"({"config": {"grad_accum": 2}})" << "config.grad_accum";
        QTest::addRow("offload") << R"({"config": {"offload_optimizer": true}})" << "config.offload_optimizer";
        // QLoRA as PEFT prepares it, paged optimizers and activation offload: the real stack only.
        QTest::addRow("amp qlora") << R"({"config": {"finetune": "qlora", "precision": "amp-bf16"}})"
                                   << "config.precision";
        QTest::addRow("paged") << R"({"config": {"optimizer": "paged-adamw-8bit"}})" << "config.optimizer";
        QTest::addRow("activation offload") << R"({"config": {"activation_offload": true}})"
                                            << "config.activation_offload";
    }
    void badRequestsExitTwo()
    {
        QFETCH(QString, patch);
        QFETCH(QString, field);
        json j = toJson(request());
        j.merge_patch(json::parse(patch.toStdString()));
        const auto f = requestFile(j);
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName()});
        p.waitForFinished(60000);
        QCOMPARE(p.exitCode(), 2);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains(field), qPrintable(err));
    }
    void garbageRequestExitsTwo()
    {
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {});
        p.waitForStarted();
        p.write("{not json");
        p.closeWriteChannel();
        p.waitForFinished(60000);
        QCOMPARE(p.exitCode(), 2);
    }
    // SIGTERM mid-run stops the probe at its next check (each phase of each step, and inside
    // forward and backward): no later step begins, and it says so and exits 143. The probe is
    // frozen (SIGSTOP) while its output is drained, so "the step under way" is known however
    // loaded the machine is. How long the stop takes is a figure, not a test: bench/stop.sh
    // times it (docs/performance.md).
    void sigtermStopsAtTheNextCheck()
    {
        const auto f = requestFile(toJson(longRun(request())));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName()});
        QVERIFY(p.waitForReadyRead(60000)); // the first progress event
        const pid_t pid = static_cast<pid_t>(p.processId());
        ::kill(pid, SIGSTOP);
        QByteArray out = p.readAllStandardOutput();
        while (p.waitForReadyRead(300)) // what it wrote before it froze
            out += p.readAllStandardOutput();
        const int underWay = lastStep(out);
        QVERIFY(underWay >= 0);
        ::kill(pid, SIGTERM);
        ::kill(pid, SIGCONT);
        QVERIFY(p.waitForFinished(120000)); // 1000 steps would take far longer
        out += p.readAllStandardOutput();
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 128 + SIGTERM);
        QVERIFY(out.contains("\"event\":\"stopped\""));
        // A line cut by the freeze may still name the next step; nothing after it may.
        QVERIFY2(lastStep(out) <= underWay + 1, out.right(300).constData());
    }
    // Issue 15: a CPU run that cannot fit the host's memory is refused before it builds anything,
    // naming the estimate and what the machine has free (it used to start and be OOM-killed).
    void hostMemoryGuardRefusesWhatCannotFit()
    {
        ProbeRequest r = request();
        r.model = findModelPreset("llama-3.1-70b");
        r.config.seqLen = 128;
        const ProbeRun run = runProbe(r);
        QCOMPARE(run.code, 2);
        QVERIFY2(run.err.contains(QStringLiteral("device = cpu: the run needs about")) &&
                     run.err.contains(QStringLiteral("available")),
                 qPrintable(run.err));
    }
    // Issue 15: SIGTERM while the probe waits for its request on stdin ends it (it used to read
    // on to EOF, which never comes here: the write end stays open), whichever thread the signal
    // lands on.
    void sigtermWhileReadingStdin()
    {
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), QStringLiteral("-")});
        QVERIFY(p.waitForStarted());
        QTRY_VERIFY_WITH_TIMEOUT(catchesSigterm(p), 30000);
        QTest::qWait(200); // now in the read loop, the write end still open
        ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 128 + SIGTERM);
        QVERIFY(p.readAllStandardOutput().contains("\"event\":\"stopped\""));
    }
    // Issue 15: SIGTERM while a large model is being built (its random initialisation takes
    // seconds on the CPU) stops the build; it used to finish the build first. The build checks
    // for the stop between tensors; a build that ran on would reach the first step and print
    // its progress before stopping, so the test asks for a stop with no progress at all.
    void sigtermDuringModelBuild()
    {
        ProbeRequest r = request(FineTune::LoRA);
        r.model = findModelPreset("qwen2.5-1.5b"); // 1.5 B parameters: seconds to initialise on a CPU
        r.config.precision = Precision::BF16;
        r.config.seqLen = 64;
        r.config.microBatch = 1;
        const auto f = requestFile(toJson(r));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE),
                {QStringLiteral("--request"), f->fileName(), QStringLiteral("--device"), QStringLiteral("cpu")});
        QVERIFY(p.waitForStarted());
        QTRY_VERIFY_WITH_TIMEOUT(catchesSigterm(p), 30000);
        QTest::qWait(300); // building
        QVERIFY(p.state() == QProcess::Running);
        ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
        QVERIFY(p.waitForFinished(120000));
        QCOMPARE(p.exitCode(), 128 + SIGTERM);
        const QByteArray out = p.readAllStandardOutput();
        QVERIFY2(out.contains("\"event\":\"stopped\"") && !out.contains("\"event\":\"progress\""), out.constData());
    }
    // ---- several ranks (--nproc): real processes over c10d's Gloo on 127.0.0.1
    void nprocOutOfRangeExitsTwo()
    {
        const auto f = requestFile(toJson(request()));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName(), QStringLiteral("--nproc"),
                                                 QStringLiteral("0")});
        p.waitForFinished(60000);
        QCOMPARE(p.exitCode(), 2);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("--nproc = 0")));
    }
    // DDP trains one model: each rank ends with the same parameters, with or without
    // checkpointing, because AdamW is applied to the rank-averaged gradient. A missing or wrong
    // collective leaves the ranks apart.
    void dataParallelRanksTrainAlike_data()
    {
        QTest::addColumn<bool>("ckpt");
        for (bool ck : {false, true})
            QTest::addRow("ddp%s", ck ? " checkpointed" : "") << ck;
    }
    // Issue 14: the fused linear cross-entropy (Liger's memory pattern) trains to the same
    // parameters as HF's loss, and what it saves is what the estimate says it saves: the probe's
    // phase peaks drop by the estimate's drop to 2% (CPU, so the CUDA-only terms cancel out).
    void fusedLossSavesWhatTheEstimateSays()
    {
        ProbeRequest a = dataParallel(0, false, 1);
        a.model.vocabSize = 4096; // logits (128 x 4096) well above grad_input and grad_weight
        ProbeRequest b = a;
        b.config.loss = Loss::Fused;
        const QStringList one{QStringLiteral("--nproc"), QStringLiteral("1")};
        const Measurement ma = resultOf(runProbe(a, one)), mb = resultOf(runProbe(b, one));
        QVERIFY2(std::abs(mb.ranks.at(0).parametersSum / ma.ranks.at(0).parametersSum - 1) < 1e-9,
                 qPrintable(QStringLiteral("%1 vs %2").arg(mb.ranks[0].parametersSum, 0, 'g', 17)
                                .arg(ma.ranks[0].parametersSum, 0, 'g', 17)));
        const Estimate ea = estimate(a.model, a.config), eb = estimate(b.model, b.config);
        for (Phase p : {Phase::Forward, Phase::Backward}) {
            const int64_t measured = steadyPeak(ma, p) - steadyPeak(mb, p);
            const int64_t estimated = ea.phase(p).peakAllocatedBytes - eb.phase(p).peakAllocatedBytes;
            QVERIFY2(measured > 0 && std::abs(double(measured - estimated)) < 0.02 * measured,
                     qPrintable(QStringLiteral("%1: measured saving %2, estimated %3")
                                    .arg(QString::fromLatin1(toString(p).data())).arg(measured).arg(estimated)));
        }
        // Under autocast the LibTorch engine refuses, naming the field.
        b.config.precision = Precision::AmpBF16;
        const ProbeRun r = runProbe(b);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(QStringLiteral("config.loss = fused")), qPrintable(r.err));
    }

    void dataParallelRanksTrainAlike()
    {
        const int zero = 0;
        QFETCH(bool, ckpt);
        static double reference = 0;
        static double single = 0;
        if (single == 0) {
            const Measurement one = resultOf(runProbe(request()));
            QVERIFY(one.ranks.empty());
            const Measurement ref = resultOf(runProbe(dataParallel(0, false)));
            reference = ref.ranks.at(0).parametersSum;
            single = resultOf(runProbe(dataParallel(0, false, 1), {QStringLiteral("--nproc"), QStringLiteral("1")}))
                         .ranks.at(0)
                         .parametersSum;
        }
        const ProbeRun r = runProbe(dataParallel(zero, ckpt));
        QCOMPARE(r.code, 0);
        const Measurement m = resultOf(r);
        QCOMPARE(QString::fromStdString(m.backend), QStringLiteral("gloo"));
        QCOMPARE(m.ranks.size(), size_t(2));
        QCOMPARE(m.ranks[0].rank, 0);
        QCOMPARE(m.ranks[1].rank, 1);
        QVERIFY2(rankSpread(m) < kUnevenSpread, qPrintable(QString::number(rankSpread(m))));
        QCOMPARE(m.ranks[0].parametersSum, m.ranks[1].parametersSum);
        QVERIFY2(std::abs(m.ranks[0].parametersSum / reference - 1) < 1e-9,
                 qPrintable(QStringLiteral("%1 vs %2").arg(m.ranks[0].parametersSum, 0, 'g', 17).arg(reference, 0, 'g', 17)));
        QVERIFY2(std::abs(single - reference) > 1e-6, "one rank alone trains on different data");
        // Only rank 0's progress is passed on: one event per phase.
        int progress = 0;
        for (const auto &e : r.events)
            progress += e.value("event", "") == "progress" && e.value("fraction", 0.0) < 1.0;
        QCOMPARE(progress, 9);
        QCOMPARE(toJson(measurementFromJson(toJson(m))), toJson(m)); // ranks round-trip
    }
    // What DDP keeps per rank, measured, against the bucket arithmetic and the estimator.
    void dataParallelKeepsBuckets()
    {
        const int zero = 0;
        const Measurement one = resultOf(runProbe(request()));
        const ProbeRequest req = dataParallel(zero, false);
        const Measurement m = resultOf(runProbe(req));
        const int64_t psi = parameterCount(tiny());
        const auto &A = m.attribution, &A1 = one.attribution;
        // Weights and AdamW state: whole on every rank.
        QCOMPARE(A[Category::Weights], A1[Category::Weights]);
        QCOMPARE(A[Category::OptimizerState], A1[Category::OptimizerState]);
        // Buckets: DDP's hold a copy of every (fp32) gradient.
        QCOMPARE(A[Category::Communication], psi * 4);
        // The estimator's per-rank terms: what a second rank changes at each phase, measured
        // against the same stage at one rank (--nproc 1), is what the estimate changes. The
        // machinery at one rank is checked on the H200 (tst_accuracy, NCCL at world size 1).
        const ProbeRequest req1 = dataParallel(zero, false, 1);
        const Measurement m1 = resultOf(runProbe(req1, {QStringLiteral("--nproc"), QStringLiteral("1")}));
        const Estimate e1 = estimate(tiny(), req1.config), e = estimate(tiny(), req.config);
        for (Phase p : {Phase::AfterLoad, Phase::Forward, Phase::Backward, Phase::Optimizer}) {
            const double measured = double(m.steady(p)->peakAllocatedBytes - m1.steady(p)->peakAllocatedBytes);
            const double estimated = double(e.phase(p).peakAllocatedBytes - e1.phase(p).peakAllocatedBytes);
            const double scale = double(m.steady(p)->peakAllocatedBytes);
            QVERIFY2(std::abs(measured - estimated) <= 0.01 * scale,
                     qPrintable(QStringLiteral("%1: measured %2, estimated %3 of %4")
                                    .arg(QString::fromLatin1(toString(p).data()))
                                    .arg(measured)
                                    .arg(estimated)
                                    .arg(scale)));
        }
    }
    void sigtermStopsEveryRank()
    {
        const auto f = requestFile(toJson(longRun(dataParallel(0, false))));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName()});
        QVERIFY(p.waitForReadyRead(60000)); // rank 0's first progress event
        const pid_t launcher = static_cast<pid_t>(p.processId());
        ::kill(launcher, SIGTERM);
        QVERIFY(p.waitForFinished(10000));
        QCOMPARE(p.exitCode(), 128 + SIGTERM);
        QVERIFY(p.readAllStandardOutput().contains("\"stopped\""));
        QVERIFY2(childrenOf(launcher).isEmpty(), "a rank outlived the launcher");
    }
    // A rank that dies mid-run leaves its peer waiting in a collective: the launcher stops the
    // peer and names the dead rank, instead of hanging.
    void aDeadRankIsNamedAndItsPeerStopped()
    {
        const auto f = requestFile(toJson(longRun(dataParallel(0, false))));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName()});
        QVERIFY(p.waitForReadyRead(60000));
        const pid_t launcher = static_cast<pid_t>(p.processId());
        const QStringList ranks = childrenOf(launcher);
        QCOMPARE(ranks.size(), 2);
        ::kill(static_cast<pid_t>(ranks.last().toInt()), SIGKILL);
        QVERIFY(p.waitForFinished(15000));
        QCOMPARE(p.exitCode(), 5);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains(QStringLiteral("killed by signal 9")), qPrintable(err));
        QVERIFY(childrenOf(launcher).isEmpty());
    }
    void snapshotHoldsTheLiveBlocksNearThePeak()
    {
        QTemporaryDir dir;
        const QString snap = dir.filePath(QStringLiteral("snap.json"));
        const ProbeRun r = runProbe(request(), {QStringLiteral("--snapshot"), snap});
        QCOMPARE(r.code, 0);
        const Measurement m = resultOf(r);
        QFile f(snap);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const json s = json::parse(f.readAll().toStdString());
        QCOMPARE(s.at("kind").get<std::string>(), std::string("probe_snapshot"));
        QCOMPARE(s.at("device").get<std::string>(), std::string("cpu"));
        const int64_t at = s.at("allocated_bytes").get<int64_t>(), peak = s.at("step_peak_allocated_bytes").get<int64_t>();
        QVERIFY(at > 0 && at <= peak);
        QVERIFY(peak <= m.peakAllocatedBytes);
        QVERIFY2(at >= peak / 2, "the sampled moment is far from the peak"); // one layer's transients at most
        QVERIFY(at >= m.attribution[Category::Weights]);
        const auto blocks = s.at("largest_block_bytes").get<std::vector<int64_t>>();
        QVERIFY(!blocks.empty());
        QVERIFY(std::is_sorted(blocks.rbegin(), blocks.rend()));
        QVERIFY(s.at("live_blocks").get<int64_t>() >= int64_t(blocks.size()));
        // Sampling allocates nothing: the measured peaks match a run without --snapshot.
        const Measurement plain = resultOf(runProbe(request()));
        QCOMPARE(plain.peakAllocatedBytes, m.peakAllocatedBytes);
    }

    // Regression for issue 3: the OOM's bytes in use were read after unwinding had freed the step.
    void goldenOomResultsParse_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qint64>("requested");
        QTest::addRow("8B full b16x4096") << QStringLiteral("llama8b-full-b16s4096-oom") << qint64(512) * 1048576;
        QTest::addRow("70B full b1x1024") << QStringLiteral("llama70b-full-b1s1024-oom") << qint64(32) * 1048576;
    }
    void goldenOomResultsParse()
    {
        QFETCH(QString, file);
        QFETCH(qint64, requested);
        QFile f(QStringLiteral(HEADROOM_SOURCE_DIR "/tests/data/h200/") + file + QStringLiteral(".result.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const Measurement m = measurementFromJson(json::parse(f.readAll().toStdString()));
        QVERIFY(m.oom.has_value());
        QCOMPARE(m.oom->requestedBytes, requested);
        QVERIFY(m.oom->phase == Phase::Forward);
        // In use when it failed: within a request of the card (139.8 GiB on the H200).
        QVERIFY(m.oom->inUseBytes > int64_t(130) << 30);
        QVERIFY(m.oom->inUseBytes + m.oom->requestedBytes > m.phases.back().deviceTotalBytes - (int64_t(2) << 30));
        QCOMPARE(toJson(measurementFromJson(toJson(m))), toJson(m)); // round trip
    }

    void cudaRequestWithoutGpuSaysNoDevice()
    {
        ProbeRequest r = request();
        r.device = "cuda";
        const auto f = requestFile(toJson(r));
        QProcess p;
        p.start(QStringLiteral(HEADROOM_PROBE), {QStringLiteral("--request"), f->fileName()});
        p.waitForFinished(60000);
#if !HEADROOM_TEST_HAVE_CUDA
        QCOMPARE(p.exitCode(), 4);
#endif
    }

    // The LibTorch engine is a module loaded next to the executable (torch_module.cpp): a probe
    // without it still answers --help and refuses a LibTorch request with exit 4, naming where it
    // looked; a module that is not a library is named with the loader's reason.
    void missingEngineModuleIsNamed()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString exe = dir.filePath(QStringLiteral("headroom-probe"));
        QVERIFY(QFile::copy(QStringLiteral(HEADROOM_PROBE), exe));
        QFile(exe).setPermissions(QFile(QStringLiteral(HEADROOM_PROBE)).permissions());
        const auto f = requestFile(toJson(request()));
        auto run = [&](const QStringList &args) {
            QProcess p;
            p.start(exe, args);
            p.waitForFinished(60000);
            return std::pair{p.exitCode(), QString::fromUtf8(p.readAllStandardOutput())};
        };
        QCOMPARE(run({QStringLiteral("--help")}).first, 0);
        auto [code, out] = run({QStringLiteral("--request"), f->fileName()});
        QCOMPARE(code, 4);
        QVERIFY2(out.contains(dir.filePath(QStringLiteral("headroom-probe-torch.so"))) && out.contains(QStringLiteral("--engine transformers")),
                 qPrintable(out));
        QFile bad(dir.filePath(QStringLiteral("headroom-probe-torch.so")));
        QVERIFY(bad.open(QIODevice::WriteOnly) && bad.write("not a library") > 0);
        bad.close();
        std::tie(code, out) = run({QStringLiteral("--request"), f->fileName()});
        QCOMPARE(code, 4);
        QVERIFY2(out.contains(QStringLiteral("cannot be loaded")), qPrintable(out));
    }
};

QTEST_GUILESS_MAIN(TestProbe)
#include "tst_probe.moc"
