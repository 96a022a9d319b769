// "Measure now" end to end: the real headroom-probe in CPU mode on a tiny model, Cancel, and
// probes that crash, print garbage, find no GPU or run out of memory. The app must survive all.
#include "guitestutil.h"
#include "mainwindow.h"
#include "measurebar.h"
#include "readiness.h"
#include "settings.h"

#include "headroom/catalog.h"

#include <QApplication>
#include <QComboBox>
#include <QPushButton>
#include <QSpinBox>

using namespace headroom;

namespace {

void useProbe(const QString &path)
{
    qputenv("HEADROOM_PROBE", path.toUtf8());
}

// The tiny model of tests/data/configs, small enough for a CPU step in well under a second.
void tinyScenario(Session &s, MainWindow &w)
{
    QCOMPARE(w.openFile(testData("configs/tiny_llama_test.json")), QString());
    Scenario sc = s.scenario();
    sc.config.finetune = FineTune::Full;
    sc.config.microBatch = 2;
    sc.config.seqLen = 128;
    sc.config.precision = Precision::FP32;
    s.setScenario(sc);
    QVERIFY(settle(s));
}

// Shows the window on the tiny scenario and runs "Measure now" with `probe` (a fake one that
// fails), until it has failed.
void measureWith(Session &s, MainWindow &w, const QString &probe)
{
    useProbe(probe);
    Settings().setProbePath(QStringLiteral("/nonexistent/headroom-probe"));
    w.show();
    tinyScenario(s, w);
    QSignalSpy failed(w.measureBar()->runner(), &ProbeRunner::failed);
    w.measureBar()->measure();
    if (w.measureBar()->runner()->isRunning())
        QVERIFY(failed.wait(30000));
}

bool waitIdle(MeasureBar *bar, int timeoutMs)
{
    QElapsedTimer t;
    t.start();
    while (bar->runner()->isRunning() && t.elapsed() < timeoutMs)
        QTest::qWait(20);
    return !bar->runner()->isRunning();
}

} // namespace

class TestMeasure : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { isolateSettings(); }
    void init()
    {
        QSettings().clear();
        Settings().setProbeDevice(QStringLiteral("cpu"));
        useProbe(QStringLiteral(HEADROOM_PROBE));
    }

    void locatesTheProbe()
    {
        QStringList searched;
        QCOMPARE(ProbeRunner::locateProbe(QString(), &searched), QFileInfo(QStringLiteral(HEADROOM_PROBE)).canonicalFilePath());
        QCOMPARE(searched.first(), QStringLiteral(HEADROOM_PROBE)); // the environment wins
        // A path that is not an executable is skipped for the next candidate (here: the build tree).
        useProbe(testData("configs/tiny_llama_test.json"));
        QCOMPARE(ProbeRunner::locateProbe(QStringLiteral("/nonexistent/headroom-probe")),
                 QFileInfo(QStringLiteral(HEADROOM_PROBE)).canonicalFilePath());
        useProbe(QStringLiteral(HEADROOM_PROBE));
        // Arguments travel as a list: a prefix with spaces and quotes never meets a shell.
        ProbeRunner::Options o;
        o.prefix = QProcess::splitCommand(QStringLiteral("ssh -o \"ProxyJump a b\" gpu-box"));
        o.program = QStringLiteral("/opt/headroom/bin/headroom-probe");
        o.device = QStringLiteral("cuda");
        const QStringList cmd = ProbeRunner::commandLine(o);
        QCOMPARE(cmd.mid(0, 4), QStringList({QStringLiteral("ssh"), QStringLiteral("-o"), QStringLiteral("ProxyJump a b"),
                                             QStringLiteral("gpu-box")}));
        QVERIFY(cmd.contains(QStringLiteral("--request")) && cmd.contains(QStringLiteral("-")));
    }

    // Issue 15: ssh hands what follows the host to the remote shell as one string, which that shell
    // splits again. Each argument is quoted for it: a probe path with spaces and ';' and an
    // --alloc-conf with a ';' arrive as they were. The "ssh" here is a script that does what ssh
    // does with its arguments (sh -c "$*"), on this machine.
    void sshPrefixQuotesForTheRemoteShell()
    {
        QTemporaryDir dir;
        const QString odd = dir.filePath(QStringLiteral("my probes; rm -rf x"));
        QVERIFY(QDir().mkpath(odd));
        const QString probe = odd + QStringLiteral("/headroom probe");
        QVERIFY(QFile::link(QFileInfo(QStringLiteral(HEADROOM_PROBE)).canonicalFilePath(), probe));
        const QString ssh = dir.filePath(QStringLiteral("ssh"));
        {
            QFile f(ssh);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("#!/bin/sh\nshift\nexec sh -c \"$*\"\n"); // drop the host, then the remote shell
        }
        QFile::setPermissions(ssh, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
        ProbeRunner::Options o;
        o.prefix = {ssh, QStringLiteral("gpu-box")};
        o.program = probe;
        o.device = QStringLiteral("cpu");
        o.steps = 2;
        o.allocConf = QStringLiteral("garbage_collection_threshold:0.6; echo injected");
        const QStringList cmd = ProbeRunner::commandLine(o);
        QVERIFY2(cmd.contains(QStringLiteral("'") + probe + QStringLiteral("'")), qPrintable(cmd.join(QLatin1Char(' '))));
        // Through the fake ssh: the probe is found under its odd path and refuses the alloc-conf
        // text whole (one argument), rather than a shell running "echo injected".
        QProcess p;
        p.start(cmd.first(), cmd.mid(1));
        QVERIFY(p.waitForStarted());
        p.write("{}");
        p.closeWriteChannel();
        QVERIFY(p.waitForFinished(60000));
        const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(!out.contains(QStringLiteral("injected")) && !err.contains(QStringLiteral("not found")), qPrintable(out + err));
        QVERIFY2(err.contains(QStringLiteral("headroom-probe")), qPrintable(err)); // the probe itself answered
        QCOMPARE(p.exitCode(), 2);
    }

    void measureNowOnTheCpu()
    {
        Session s;
        MainWindow w(&s);
        w.show();
        tinyScenario(s, w);
        QSignalSpy added(&s, &Session::measurementsChanged);
        QSignalSpy progress(w.measureBar()->runner(), &ProbeRunner::progress);
        auto *device = w.findChild<QComboBox *>(QStringLiteral("probeDevice"));
        device->setCurrentIndex(device->findData(QStringLiteral("auto"))); // "GPU if present", none here
        // No layout jump when it starts: the controls stay where they were. Measured once the
        // window has settled: the readiness check answers in the background (seconds under load)
        // and its status line may move the bar once (it did, in a loaded ctest run).
        QTRY_VERIFY_WITH_TIMEOUT(!w.measureBar()->readinessPending(), scaledMs(60000));
        QApplication::processEvents();
        auto *cancel = w.findChild<QPushButton *>(QStringLiteral("cancelProbe"));
        const QPoint cancelAt = cancel->mapTo(&w, QPoint(0, 0));
        w.findChild<QPushButton *>(QStringLiteral("measureNow"))->click();
        QVERIFY(w.measureBar()->runner()->isRunning()); // the GUI did not wait
        QApplication::processEvents();
        QCOMPARE(cancel->mapTo(&w, QPoint(0, 0)), cancelAt);
        QVERIFY(added.wait(120000));
        QVERIFY(progress.count() >= 3);
        QCOMPARE(s.measurements().size(), size_t(1));
        const Measurement &m = s.measurements()[0];
        QCOMPARE(m.device, std::string("cpu"));
        QCOMPARE(m.model.hiddenSize, 64);
        QVERIFY(m.peakAllocatedBytes > 0);
        QCOMPARE(s.selectedIndex(), 0);
        // "GPU if present" with no GPU says that it fell back, and what a CPU number lacks.
        QVERIFY2(w.measureBar()->statusText().startsWith(QStringLiteral("No usable GPU, so measured on the CPU")),
                 qPrintable(w.measureBar()->statusText()));
        QVERIFY(waitIdle(w.measureBar(), 5000));
    }

    // Two GPUs in the scenario: the same button starts two ranks (over Gloo on the CPU), and the
    // measurement that comes back lists both.
    void measureNowWithTwoRanks()
    {
        Session s;
        MainWindow w(&s);
        w.show();
        tinyScenario(s, w);
        Scenario sc = s.scenario();
        sc.config.worldSize = 2;
        sc.config.zeroStage = 0; // DDP: the LibTorch engine's own ranks
        s.setScenario(sc);
        QVERIFY(settle(s));
        QSignalSpy added(&s, &Session::measurementsChanged);
        w.findChild<QPushButton *>(QStringLiteral("measureNow"))->click();
        QVERIFY(added.wait(120000));
        QCOMPARE(s.measurements().size(), size_t(1));
        const Measurement &m = s.measurements()[0];
        QCOMPARE(m.backend, std::string("gloo"));
        QCOMPARE(m.ranks.size(), size_t(2));
        QCOMPARE(m.config.zeroStage, 0);
        QVERIFY(rankSpread(m) < kUnevenSpread);
        QVERIFY(waitIdle(w.measureBar(), 5000));
    }

    // What the LibTorch engine refuses (here gradient accumulation) goes to the transformers
    // engine, and the status says so; without Transformers installed that run ends in a clear
    // message, with the GUI alive.
    void refusedConfigurationsUseTheTransformersEngine()
    {
        Session s;
        MainWindow w(&s);
        w.show();
        tinyScenario(s, w);
        Scenario sc = s.scenario();
        sc.config.gradAccum = 2;
        s.setScenario(sc);
        QVERIFY(settle(s));
        w.findChild<QPushButton *>(QStringLiteral("measureNow"))->click();
        QVERIFY2(w.measureBar()->statusText().contains(QStringLiteral("transformers engine")),
                 qPrintable(w.measureBar()->statusText()));
        QVERIFY(waitIdle(w.measureBar(), 120000));
        QVERIFY(!w.measureBar()->statusText().isEmpty());
    }

    void cancelStops()
    {
        Session s;
        MainWindow w(&s);
        w.show();
        tinyScenario(s, w);
        Settings().setProbeSteps(100); // long enough to cancel
        Scenario sc = s.scenario();
        sc.config.seqLen = 512;
        sc.config.microBatch = 8;
        s.setScenario(sc);
        QVERIFY(settle(s));
        QSignalSpy progress(w.measureBar()->runner(), &ProbeRunner::progress);
        QSignalSpy stopped(w.measureBar()->runner(), &ProbeRunner::stopped);
        w.measureBar()->measure();
        QVERIFY(progress.wait(60000));
        QVERIFY(progress.wait(60000)); // a step is under way
        w.findChild<QPushButton *>(QStringLiteral("cancelProbe"))->click();
        QVERIFY(stopped.wait(60000)); // the 100 steps would take far longer; the stop's time is bench/stop.sh's
        QCOMPARE(w.measureBar()->statusText(), QStringLiteral("Stopped."));
        QVERIFY(s.measurements().empty());
        QVERIFY(!w.measureBar()->runner()->isRunning());
    }

    // Issue 13: a failure is about the configuration it was for; changing the configuration
    // clears it, and the offer to run on the CPU with it.
    void staleFailureClearsOnChange()
    {
        Session s;
        MainWindow w(&s);
        measureWith(s, w, testData("fake_probes/nogpu.sh"));
        QVERIFY(w.measureBar()->statusText().contains(QStringLiteral("No usable GPU")));
        auto *cpu = w.findChild<QPushButton *>(QStringLiteral("cpuInstead"));
        QVERIFY(cpu->isVisibleTo(&w));
        w.findChild<QSpinBox *>(QStringLiteral("microBatch"))->setValue(4);
        QVERIFY(!w.measureBar()->statusText().contains(QStringLiteral("No usable GPU"))); // back to what it can do here
        QVERIFY(!cpu->isVisibleTo(&w));
        useProbe(QStringLiteral(HEADROOM_PROBE));
        QVERIFY(waitIdle(w.measureBar(), 5000));
    }

    void misbehavingProbes_data()
    {
        QTest::addColumn<QString>("probe");
        QTest::addColumn<QString>("mentions");
        QTest::addColumn<bool>("offersCpu");
        QTest::addRow("crash") << testData("fake_probes/crash.sh") << QStringLiteral("crashed") << false;
        QTest::addRow("garbage") << testData("fake_probes/garbage.sh") << QStringLiteral("not the Headroom protocol") << false;
        QTest::addRow("no gpu") << testData("fake_probes/nogpu.sh") << QStringLiteral("No usable GPU") << true;
        // issue 31 row 5: software this machine lacks is named, and the CPU (which would fail the
        // same way) is not offered
        QTest::addRow("no torch") << testData("fake_probes/nopackage.sh")
                                  << QStringLiteral("Cannot measure here: the transformers engine needs PyTorch") << false;
    }
    void misbehavingProbes()
    {
        QFETCH(QString, probe);
        QFETCH(QString, mentions);
        QFETCH(bool, offersCpu);
        Session s;
        MainWindow w(&s);
        measureWith(s, w, probe);
        const QString status = w.measureBar()->statusText();
        QVERIFY2(status.contains(mentions), qPrintable(status));
        QCOMPARE(w.findChild<QPushButton *>(QStringLiteral("cpuInstead"))->isVisibleTo(&w), offersCpu);
        QVERIFY(s.measurements().empty());
        // The app is alive and measures again with a working probe.
        useProbe(QStringLiteral(HEADROOM_PROBE));
        QSignalSpy added(&s, &Session::measurementsChanged);
        if (offersCpu)
            w.findChild<QPushButton *>(QStringLiteral("cpuInstead"))->click();
        else
            w.measureBar()->measure();
        QVERIFY(added.wait(120000));
        QCOMPARE(s.measurements().size(), size_t(1));
        QVERIFY(waitIdle(w.measureBar(), 5000));
    }

    // Issue 31 item 5: before it is pressed, Measure now says what it will do here, or what stops
    // it and what to install: the probe, its engines, a GPU, the Python packages, found on this
    // machine (a real interpreter and the real probe).
    void measureNowSaysWhatItCanDoHere()
    {
        const QString probe = QStringLiteral(HEADROOM_PROBE);
        const ModelArch llama = findModelPreset("llama-3.2-1b");
        const ModelArch gpt2 = findModelPreset("gpt2");
        TrainingConfig full;
        full.finetune = FineTune::Full;
        // no interpreter at all
        const ProbeReadiness none = ProbeReadiness::check(probe, QStringLiteral("/nonexistent/python9"));
        QVERIFY(!none.pythonError.isEmpty());
        const auto p0 = none.plan(gpt2, full, QStringLiteral("libtorch"), QStringLiteral("cpu"));
        QVERIFY2(p0.blocker.contains(QStringLiteral("needs the transformers engine")) &&
                     p0.blocker.contains(QStringLiteral("/nonexistent/python9 not found")),
                 qPrintable(p0.blocker));
        // Debian's python3: torch, no Transformers
        const ProbeReadiness deb = ProbeReadiness::check(probe, QStringLiteral("/usr/bin/python3"));
        QVERIFY2(deb.pythonError.isEmpty() && !deb.torch.isEmpty(), qPrintable(deb.pythonError));
        const auto p1 = deb.plan(gpt2, full, QStringLiteral("libtorch"), QStringLiteral("auto"));
        if (deb.transformers.isEmpty())
            QVERIFY2(p1.blocker.contains(QStringLiteral("has no transformers: pip install transformers")), qPrintable(p1.blocker));
        if (deb.libtorch) { // a Llama on the LibTorch engine needs no Python
            const auto p2 = deb.plan(llama, full, QStringLiteral("libtorch"), QStringLiteral("auto"));
            QVERIFY2(p2.blocker.isEmpty() && p2.summary.startsWith(QStringLiteral("LibTorch engine")), qPrintable(p2.summary));
        }
        if (!deb.gpu) {
            const auto p3 = deb.plan(llama, full, QStringLiteral("libtorch"), QStringLiteral("cuda"));
            QVERIFY2(p3.blocker.contains(QStringLiteral("no NVIDIA GPU")), qPrintable(p3.blocker));
        }
        // and the bar says it, without a press
        useProbe(probe);
        qputenv("HEADROOM_PYTHON", "/usr/bin/python3");
        Session s;
        MainWindow w(&s);
        w.show();
        tinyScenario(s, w);
        QTRY_VERIFY_WITH_TIMEOUT(w.measureBar()->statusText().contains(QStringLiteral(" engine, on the")) ||
                                     w.measureBar()->statusText().startsWith(QStringLiteral("Cannot measure here")),
                                 20000);
        qunsetenv("HEADROOM_PYTHON");
    }

    void outOfMemoryIsAResult()
    {
        // A remote H200 that ran out of memory, replayed through the runner as a remote probe would print it.
        qputenv("HEADROOM_REPLAY", testData("h200/llama8b-full-b16s4096-oom.result.json").toUtf8());
        qputenv("HEADROOM_REPLAY_CODE", "3");
        useProbe(testData("fake_probes/replay.sh"));
        Session s;
        MainWindow w(&s);
        w.show();
        QSignalSpy added(&s, &Session::measurementsChanged);
        w.measureBar()->measureOn(QStringLiteral("cuda"));
        QVERIFY(added.wait(30000));
        const Measurement &m = s.measurements().at(0);
        QVERIFY(m.oom.has_value());
        QVERIFY(m.oom->phase == Phase::Forward);
        const QString status = w.measureBar()->statusText();
        QVERIFY2(status.startsWith(QStringLiteral("Out of memory in forward at 138.6 GiB")), qPrintable(status));
        QVERIFY2(w.verdictBanner() != nullptr, "banner");
        qunsetenv("HEADROOM_REPLAY");
        qunsetenv("HEADROOM_REPLAY_CODE");
    }
};

QTEST_MAIN(TestMeasure)
#include "tst_measure.moc"
