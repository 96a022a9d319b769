// The explorer's item models under QAbstractItemModelTester, across the states they go through.
#include "breakdownmodel.h"
#include "guitestutil.h"
#include "hubfetch.h"
#include "hubserver.h"
#include "headroom/error.h"
#include "headroom/hub.h"
#include "measurementsmodel.h"
#include "recommendationmodel.h"
#include "scalingmodel.h"
#include "sheetio.h"

#include <QAbstractItemModelTester>

using namespace headroom;

class TestGuiModels : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { isolateSettings(); }

    // Issue 32, rows 1 and 13, through the explorer's transport (Qt Network): the Hub's redirect to
    // another host gets no token, and a body cut short of its Content-Length is refused.
    void row1_qtTransportKeepsTheTokenHome()
    {
        HubServer hub;
        QVERIFY(hub.start());
        QTemporaryDir cache;
        useHubInThisProcess(hub.endpoint(), cache.path());
        qputenv("HF_TOKEN", "hf_test_good");
        const ModelArch m = resolveModelText("elsewhere-org/TinyLlama-1.1B-Chat-v1.0", "model", nullptr);
        QCOMPARE(m.modelType, std::string("llama"));
        const QStringList log = hub.requests();
        QVERIFY(log.size() >= 2);
        QVERIFY(log.at(0).endsWith(QStringLiteral("Bearer hf_test_good")));
        int redirected = 0;
        const QString leak = tokenLeft(log, QStringLiteral("hf_test_good"), &redirected);
        QVERIFY2(leak.isEmpty(), qPrintable(leak));
        QVERIFY(redirected >= 1);
        bool refused = false;
        try {
            resolveModelText("short-org/TinyLlama-1.1B-Chat-v1.0", "model", nullptr);
        } catch (const InputError &e) {
            refused = true;
            QVERIFY2(std::string(e.what()).find('\n') == std::string::npos, e.what());
        }
        QVERIFY(refused);
        QVERIFY(!QDir(cache.path() + QStringLiteral("/models--short-org--TinyLlama-1.1B-Chat-v1.0")).exists());
        qunsetenv("HF_TOKEN");
    }

    void breakdownModel_data()
    {
        QTest::addColumn<int>("view");
        QTest::addColumn<bool>("measured");
        QTest::addRow("step") << int(BreakdownModel::View::Step) << false;
        QTest::addRow("step, measured") << int(BreakdownModel::View::Step) << true;
        QTest::addRow("phases") << int(BreakdownModel::View::Phases) << false;
        QTest::addRow("phases, measured") << int(BreakdownModel::View::Phases) << true;
    }
    void breakdownModel()
    {
        QFETCH(int, view);
        QFETCH(bool, measured);
        BreakdownModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const Measurement m = sheetio::readMeasurement(testData("h200/llama8b-lora16-b4s2048.result.json"));
        Scenario s = defaultScenario();
        const Report r = buildReport(s);
        model.setContent(r, measured ? &m : nullptr, Unit::GiB, BreakdownModel::View(view));
        const int bars = view == int(BreakdownModel::View::Step) ? 1 + measured : 4 * (1 + measured);
        QCOMPARE(model.columnCount(), bars);
        QCOMPARE(model.rowCount(), kCategoryCount + 1);
        // Every estimated bar adds up to what core says.
        for (int c = 0; c < model.columnCount(); ++c) {
            if (model.data(model.index(0, c), BreakdownModel::MeasuredRole).toBool())
                continue;
            int64_t sum = 0;
            for (int row = 0; row < model.rowCount(); ++row)
                sum += model.data(model.index(row, c), BreakdownModel::BytesRole).toLongLong();
            if (view == int(BreakdownModel::View::Step))
                QCOMPARE(sum, r.estimate.peak.total());
            else
                QVERIFY(sum >= r.estimate.phase(kAllPhases[size_t(c / (1 + measured))]).peakAllocatedBytes);
        }
        if (measured && view == int(BreakdownModel::View::Step)) {
            int64_t sum = 0;
            for (int row = 0; row < model.rowCount(); ++row)
                sum += model.data(model.index(row, 1), BreakdownModel::BytesRole).toLongLong();
            QCOMPARE(sum, m.peakReservedBytes + m.cudaContextBytes); // attribution + slack + context
        }
        // A step the engine did not split by category (a post-training step: TRL's loss runs no
        // attribution pass) stacks as one measured block, not as "temporaries".
        if (measured && view == int(BreakdownModel::View::Step)) {
            const Measurement kto = sheetio::readMeasurement(testData("h200/posttrain-2026-12-05/l1b-kto-lora-b4s1024.json"));
            QVERIFY(m.attributed() && !kto.attributed());
            model.setContent(r, &kto, Unit::GiB, BreakdownModel::View::Step);
            const auto bytes = [&](int row) { return model.data(model.index(row, 1), BreakdownModel::BytesRole).toLongLong(); };
            QCOMPARE(bytes(BreakdownModel::kUnattributedRow), kto.peakAllocatedBytes);
            QCOMPARE(bytes(static_cast<int>(Category::Temporaries)), 0);
            QCOMPARE(bytes(static_cast<int>(Category::CudaContext)), kto.cudaContextBytes);
        }
        Report failed;
        failed.error = "config.micro_batch = 0: must be at least 1";
        model.setContent(failed, nullptr, Unit::GB, BreakdownModel::View::Step); // an error report: no bars
        QCOMPARE(model.columnCount(), 0);
    }

    void recommendationModel()
    {
        RecommendationModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const Report r = buildReport(defaultScenario());
        QVERIFY(!r.recommendations.empty());
        model.setContent(r.recommendations, Unit::GiB);
        QCOMPARE(model.rowCount(), int(r.recommendations.size()));
        QCOMPARE(model.data(model.index(0, RecommendationModel::Change)).toString(),
                 QString::fromStdString(r.recommendations[0].title));
        // "1 · dynamic" is explained where it is shown: the column's header and each cell.
        const QString why = model.headerData(RecommendationModel::Kind, Qt::Horizontal, Qt::ToolTipRole).toString();
        QVERIFY(why.contains(QStringLiteral("1 · dynamic")) && why.contains(QStringLiteral("3 · sharding")));
        QCOMPARE(model.data(model.index(0, RecommendationModel::Kind), Qt::ToolTipRole).toString(), why);
        model.setContent({}, Unit::GB);
        QCOMPARE(model.rowCount(), 0);
    }

    void scalingAndMeasurementModels()
    {
        Session session;
        QVERIFY(settle(session));
        ScalingModel scaling;
        QAbstractItemModelTester t1(&scaling, QAbstractItemModelTester::FailureReportingMode::QtTest);
        scaling.setContent(session.scaling(), Unit::GiB);
        QVERIFY(scaling.rowCount() >= 6);
        // The seq group doubles the sequence each row, and says what that costs.
        QCOMPARE(scaling.data(scaling.index(1, ScalingModel::Grows)).toString(), QStringLiteral("seq x2"));
        QVERIFY(scaling.data(scaling.index(1, ScalingModel::Costs)).toString().startsWith(QLatin1Char('+')));
        const QString md = scaling.toMarkdown();
        QCOMPARE(md.count(QLatin1Char('\n')), scaling.rowCount() + 2);
        QCOMPARE(scaling.headerData(ScalingModel::Verdict, Qt::Horizontal).toString(), QStringLiteral("Fits the card?"));

        MeasurementsModel measurements(&session);
        QAbstractItemModelTester t2(&measurements, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(measurements.rowCount(), 0);
        session.addMeasurement(sheetio::readMeasurement(testData("h200/llama8b-lora16-b4s2048.result.json")));
        QCOMPARE(measurements.rowCount(), 1);
        QCOMPARE(measurements.data(measurements.index(0, MeasurementsModel::Device)).toString(), QStringLiteral("NVIDIA H200 · libtorch"));
        // The estimate for that configuration is within 1% of the H200 measurement (docs/accuracy.md).
        const QString err = measurements.data(measurements.index(0, MeasurementsModel::Error)).toString();
        QVERIFY2(std::abs(err.chopped(1).toDouble()) < 1.0, qPrintable(err));
        session.setUnits(Unit::GB);
        QVERIFY(measurements.data(measurements.index(0, MeasurementsModel::Peak)).toString().endsWith(QStringLiteral(" GB")));
        // One process: no ranks. A two-rank run (the probe's --nproc 2 over Gloo) says how many
        // ranks, which backend and how even they were, and lists each rank in the tooltip.
        QCOMPARE(measurements.data(measurements.index(0, MeasurementsModel::Ranks)).toString(), QStringLiteral("—"));
        session.addMeasurement(sheetio::readMeasurement(testData("cpu/tiny-zero3-2ranks.result.json")));
        QCOMPARE(measurements.rowCount(), 2);
        QCOMPARE(measurements.data(measurements.index(1, MeasurementsModel::Ranks)).toString(),
                 QStringLiteral("2 × gloo, spread 1.000×"));
        const QString tip = measurements.data(measurements.index(1, MeasurementsModel::Ranks), Qt::ToolTipRole).toString();
        QVERIFY2(tip.contains(QStringLiteral("rank 0:")) && tip.contains(QStringLiteral("rank 1:")), qPrintable(tip));
        QVERIFY(!tip.contains(QStringLiteral("Uneven")));
    }
};

QTEST_MAIN(TestGuiModels)
#include "tst_guimodels.moc"
