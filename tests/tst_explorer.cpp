// Issue 31, the explorer for daily use: two configurations compared side by side (the Compare tab
// and the comparison sheet), and the rest of its expectations that came after the first pass.
// Real widgets on the offscreen platform, real files.
#include "appearance.h"
#include "charts.h"
#include "chartpanel.h"
#include "settings.h"
#include "verdictbanner.h"
#include "comparepanel.h"
#include "layerspanel.h"
#include "timelinepanel.h"
#include "guitestutil.h"
#include "mainwindow.h"

#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/layers.h"

#include <QAction>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QMenuBar>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QUndoStack>

#include <functional>

#include <nlohmann/json.hpp>

using namespace headroom;

namespace {

QByteArray readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QAction *menuAction(MainWindow &w, const QString &text)
{
    for (QAction *a : w.menuBar()->findChildren<QAction *>())
        if (a->text() == text)
            return a;
    return nullptr;
}

// The row of `table` whose first cell reads `first`, or -1.
int rowNamed(QTableWidget *table, const QString &first)
{
    for (int r = 0; r < table->rowCount(); ++r)
        if (table->item(r, 0) && table->item(r, 0)->text() == first)
            return r;
    return -1;
}

// Pinned: the default scenario (Llama-3.1-8B LoRA b4 x 2048 on an H100); current: micro-batch 8
// and checkpointing on.
void pinThenChange(Session &s)
{
    s.setScenario(defaultScenario());
    s.recomputeNow();
    s.pin();
    Scenario next = s.scenario();
    next.config.microBatch = 8;
    next.config.gradCheckpointing = true;
    s.applyScenario(next, QStringLiteral("test"));
    QVERIFY(settle(s));
}

} // namespace

class TestExplorer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { isolateSettings(); }

    // Going back to a configuration (undo here) shows its advice and curves with the first report
    // that lands: the full pass is kept, not computed again; a configuration never seen first
    // lands quick, its advice the previous one's, marked stale, until the full pass follows.
    void goingBackIsImmediate()
    {
        Session::forgetComputed();
        Session s;
        QVERIFY(settle(s));
        const auto firstLanding = [&s](const std::function<void()> &change) {
            QEventLoop loop;
            bool stale = true;
            auto c = QObject::connect(&s, &Session::reportReady, &loop, [&] {
                stale = s.adviceIsStale();
                loop.quit();
            });
            change();
            QTimer::singleShot(scaledMs(20000), &loop, &QEventLoop::quit);
            loop.exec();
            QObject::disconnect(c);
            return stale;
        };
        Scenario next = s.scenario();
        next.config.microBatch = 3;
        QVERIFY2(firstLanding([&] { s.applyScenario(next, QStringLiteral("test")); }), "a new configuration lands quick first");
        QVERIFY(settle(s));
        const auto recs = s.report().recommendations.size();
        QVERIFY(!firstLanding([&] { s.undoStack()->undo(); }));
        QVERIFY(s.report().scenario == defaultScenario());
        QVERIFY(!s.isComputing());
        QVERIFY(!s.report().recommendations.empty());
        QVERIFY(!firstLanding([&] { s.undoStack()->redo(); }));
        QCOMPARE(s.report().recommendations.size(), recs);
        QCOMPARE(s.report().scenario.config.microBatch, int64_t(3));
        // The benchmark's reset: the same configuration is computed again, quick first.
        Session::forgetComputed();
        QVERIFY(firstLanding([&] { s.undoStack()->undo(); }));
        QVERIFY(settle(s));
    }

    // Nothing pinned: the tab says how to start, and offers nothing to unpin.
    void compareTabExplainsItselfWhenEmpty()
    {
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        w.show();
        w.showTab(MainWindow::Tab::Compare);
        QVERIFY(settle(s));
        auto *hint = w.comparePanel()->findChild<QLabel *>(QStringLiteral("compareHint"));
        QVERIFY(hint && hint->isVisible());
        QVERIFY(hint->text().contains(QStringLiteral("Ctrl+Shift+P")));
        QVERIFY(!w.comparePanel()->findChild<QWidget *>(QStringLiteral("unpin"))->isEnabled());
        QCOMPARE(w.comparePanel()->chart()->barLabels(), QStringList());
    }

    // Pin, change, compare: both bars, the difference per category (more activations at twice
    // the batch, even checkpointed), both verdicts and exactly the two settings that changed.
    void pinnedAndCurrentSideBySide()
    {
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        w.show();
        // through the menu, as a user would (View > Pin for comparison, Ctrl+Shift+P)
        QAction *pin = menuAction(w, QStringLiteral("&Pin for comparison"));
        QVERIFY(pin);
        QCOMPARE(pin->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
        QVERIFY(settle(s));
        pin->trigger();
        QCOMPARE(w.currentTab(), MainWindow::Tab::Compare);
        QVERIFY(s.pinned().has_value());
        Scenario next = s.scenario();
        next.config.microBatch = 8;
        next.config.gradCheckpointing = true;
        s.applyScenario(next, QStringLiteral("test"));
        QVERIFY(settle(s));
        ComparePanel *c = w.comparePanel();
        QCOMPARE(c->chart()->barLabels(), (QStringList{QStringLiteral("Pinned"), QStringLiteral("Current")}));
        QVERIFY(!c->findChild<QLabel *>(QStringLiteral("compareHint"))->isVisible());

        const int act = rowNamed(c->amounts(), QStringLiteral("Activations"));
        QVERIFY(act >= 0);
        const Estimate &pinnedEst = s.pinnedReport().estimate, &currentEst = s.report().estimate;
        QCOMPARE(c->amounts()->item(act, 1)->text(), QString::fromStdString(formatBytes(pinnedEst.peak[Category::Activations], Unit::GiB, 2)));
        QCOMPARE(c->amounts()->item(act, 2)->text(), QString::fromStdString(formatBytes(currentEst.peak[Category::Activations], Unit::GiB, 2)));
        QCOMPARE(c->amounts()->item(act, 3)->text(),
                 QString::fromStdString(signedBytes(currentEst.peak[Category::Activations] - pinnedEst.peak[Category::Activations], Unit::GiB)));
        // the weights did not change: a zero difference
        QCOMPARE(c->amounts()->item(rowNamed(c->amounts(), QStringLiteral("Weights")), 3)->text(), QStringLiteral("0"));
        // the chart's bars are the two estimates at their peaks
        const int actRow = static_cast<int>(Category::Activations);
        QCOMPARE(c->chart()->values(actRow).size(), 2);
        QVERIFY(c->chart()->values(actRow)[0] != c->chart()->values(actRow)[1]);

        QCOMPARE(c->changes()->rowCount(), 2);
        QCOMPARE(c->changes()->item(0, 0)->text(), QStringLiteral("grad_checkpointing"));
        QCOMPARE(c->changes()->item(0, 1)->text(), QStringLiteral("false"));
        QCOMPARE(c->changes()->item(0, 2)->text(), QStringLiteral("true"));
        QCOMPARE(c->changes()->item(1, 0)->text(), QStringLiteral("micro_batch"));
        QCOMPARE(c->changes()->item(1, 1)->text(), QStringLiteral("4"));
        QCOMPARE(c->changes()->item(1, 2)->text(), QStringLiteral("8"));

        const QString verdicts = c->verdicts();
        QVERIFY2(verdicts.startsWith(QStringLiteral("Pinned: Llama 3.1 8B, LoRA r16")), qPrintable(verdicts));
        QVERIFY2(verdicts.contains(QStringLiteral("\nCurrent: Llama 3.1 8B")), qPrintable(verdicts));
        QVERIFY2(verdicts.contains(QStringLiteral("batch 8 x 2048")), qPrintable(verdicts));

        // the pin stays while the scenario changes; unpinning empties the tab again
        QVERIFY(w.windowTitle().size() > 0);
        s.unpin();
        QVERIFY(!s.pinned());
        QVERIFY(c->findChild<QLabel *>(QStringLiteral("compareHint"))->isVisible());
        QCOMPARE(c->chart()->barLabels(), QStringList());
    }

    // The comparison sheet: JSON that reopens pinned, Markdown and HTML with the diff and both
    // verdicts, a PDF, and CSV rows for the pinned estimate. Without a pin none of it appears.
    void comparisonSheetExportsAndReopens()
    {
        QTemporaryDir dir;
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        pinThenChange(s);
        const QString js = dir.filePath(QStringLiteral("compare.json"));
        for (const char *ext : {"json", "md", "html", "pdf", "csv", "png"})
            QCOMPARE(w.exportTo(dir.filePath(QStringLiteral("compare.") + QLatin1String(ext))), QString());

        const auto j = nlohmann::json::parse(readAll(js).toStdString());
        QVERIFY(j.contains("pinned"));
        QCOMPARE(j["pinned"]["config"]["micro_batch"].get<int>(), 4);
        QCOMPARE(j["config"]["micro_batch"].get<int>(), 8);
        QCOMPARE(j["pinned"]["changes"].size(), size_t(2));
        QCOMPARE(j["pinned"]["changes"][1]["setting"].get<std::string>(), std::string("micro_batch"));
        QCOMPARE(j["pinned"]["estimate"]["peak"]["allocated_bytes"].get<int64_t>(), s.pinnedReport().estimate.peakAllocatedBytes);

        const QString md = QString::fromUtf8(readAll(dir.filePath(QStringLiteral("compare.md"))));
        QVERIFY(md.contains(QStringLiteral("## Compared with the pinned configuration")));
        QVERIFY(md.contains(QStringLiteral("| micro_batch | 4 | 8 |")));
        QVERIFY(md.contains(QStringLiteral("| grad_checkpointing | false | true |")));
        QVERIFY(md.contains(QStringLiteral("## Breakdown compared (each at its own peak)")));
        // the comparison comes before the current configuration's own sheet
        QVERIFY(md.indexOf(QStringLiteral("## What changed")) < md.indexOf(QStringLiteral("## Configuration")));
        const QString html = QString::fromUtf8(readAll(dir.filePath(QStringLiteral("compare.html"))));
        QVERIFY(html.contains(QStringLiteral("<h2>What changed</h2>")));
        QVERIFY(html.contains(QStringLiteral("<td>micro_batch</td><td>4</td><td>8</td>")));
        QVERIFY(readAll(dir.filePath(QStringLiteral("compare.pdf"))).startsWith("%PDF"));
        const QString csv = QString::fromUtf8(readAll(dir.filePath(QStringLiteral("compare.csv"))));
        QVERIFY(csv.contains(QStringLiteral("pinned_total,peak_allocated,%1,").arg(s.pinnedReport().estimate.peakAllocatedBytes)));

        // reopened in a fresh window: pinned again, the same comparison
        Session s2;
        MainWindow w2(&s2);
        QCOMPARE(w2.openFile(js), QString());
        QVERIFY(settle(s2));
        QVERIFY(s2.pinned().has_value());
        QVERIFY(*s2.pinned() == *s.pinned());
        QVERIFY(s2.scenario() == s.scenario());
        QCOMPARE(s2.pinnedReport().estimate.peakAllocatedBytes, s.pinnedReport().estimate.peakAllocatedBytes);

        // unpinned, the sheet is the plain one
        s.unpin();
        const QString plain = dir.filePath(QStringLiteral("plain.md"));
        QCOMPARE(w.exportTo(plain), QString());
        QVERIFY(!QString::fromUtf8(readAll(plain)).contains(QStringLiteral("Compared with the pinned configuration")));
    }

    // A pinned part of a sheet is read as strictly as the rest, its errors named under "pinned".
    void badPinnedSheetNamesTheField()
    {
        QTemporaryDir dir;
        Session s;
        MainWindow w(&s);
        pinThenChange(s);
        const QString js = dir.filePath(QStringLiteral("compare.json"));
        QCOMPARE(w.exportTo(js), QString());
        auto j = nlohmann::json::parse(readAll(js).toStdString());
        j["pinned"]["config"]["micro_batch"] = -3;
        QFile f(js);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(QByteArray::fromStdString(j.dump()));
        f.close();
        const QString problem = w.openFile(js);
        QVERIFY2(problem.contains(QStringLiteral("sheet.pinned.config")), qPrintable(problem));
        QVERIFY2(problem.contains(QStringLiteral("-3")), qPrintable(problem));
        QVERIFY(!problem.contains(QLatin1Char('\n')));
    }

    // The per-layer view: one bar per decoder layer and one outside them, stacked by kind of op;
    // the moment is the step's peak or the end of forward; a measured timeline (the Timeline
    // tab's overlay) adds a measured column by kind.
    void layersByLayerAndKind()
    {
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        w.show();
        Scenario sc = defaultScenario();
        sc.model = findModelPreset("llama-3.2-1b");
        sc.config.lora.targets = defaultLoraTargets(sc.model);
        sc.config.seqLen = 1024;
        s.setScenario(sc);
        QVERIFY(settle(s));
        w.showTab(MainWindow::Tab::Layers);
        LayersPanel *p = w.layersPanel();
        QTRY_COMPARE(p->chart()->barCount(), 17); // 16 layers and "out"
        QCOMPARE(p->chart()->shownLabels().front(), QStringLiteral("0"));
        QCOMPARE(p->chart()->shownLabels().back(), QStringLiteral("out"));
        QVERIFY2(p->summary().contains(QStringLiteral("at the step's peak")), qPrintable(p->summary()));
        // every layer holds activations of attention and of the MLP
        const QList<qreal> attention = p->chart()->values(static_cast<int>(OpKind::Attention));
        QCOMPARE(attention.size(), 17);
        for (int l = 0; l < 16; ++l)
            QVERIFY(attention[l] > 0);
        p->findChild<QComboBox *>(QStringLiteral("layersMoment"))->setCurrentIndex(1);
        QVERIFY2(p->summary().contains(QStringLiteral("at the end of the forward pass")), qPrintable(p->summary()));
        const int loraRow = static_cast<int>(OpKind::Lora);
        QCOMPARE(p->kinds()->item(loraRow, 0)->text(), QStringLiteral("LoRA"));
        QVERIFY(p->kinds()->item(loraRow, 1)->text() != QStringLiteral("0.00 GiB")); // the adapters' fp32 inputs
        QCOMPARE(p->kinds()->columnCount(), 2);
        QCOMPARE(w.timelinePanel()->openMeasured(testData("h200/timelines/gpt2-bf16-full-adamw-b8s1024.json")), QString());
        QCOMPARE(p->kinds()->columnCount(), 3);
        QVERIFY(p->summary().contains(QStringLiteral("gpt2-bf16-full-adamw-b8s1024.json")));
        // the recorded run's attention (SDPA's lines) is found by its code lines
        QVERIFY(p->kinds()->item(static_cast<int>(OpKind::Attention), 2)->text() != QStringLiteral("0.00 GiB"));
        // Ctrl+6 shows it; --tab names it
        QCOMPARE(MainWindow::tabNamed(QStringLiteral("layers")), std::optional<MainWindow::Tab>(MainWindow::Tab::Layers));
        QVERIFY(!MainWindow::tabNamed(QStringLiteral("layer")).has_value());
    }

    // A dark palette reaches the charts and the verdict's colours, and a sheet's picture stays a
    // light page; back to light, everything is as before.
    void darkPaletteReachesChartsAndBanner()
    {
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        w.show();
        QVERIFY(settle(s)); // the default: out of memory on an H100
        const auto cornerLightness = [](const QImage &img) { return img.pixelColor(img.width() / 2, 8).lightness(); };
        BreakdownChart *chart = w.chartPanel()->chart();
        QVERIFY(cornerLightness(chart->grab().toImage()) > 200);
        appearance::apply(appearance::Mode::Dark);
        QVERIFY(appearance::isDark());
        QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
        QTRY_VERIFY(cornerLightness(chart->grab().toImage()) < 80);
        QVERIFY(cornerLightness(chart->toPixmap(QSize(900, 520)).toImage()) > 200); // the file's picture
        QVERIFY(cornerLightness(chart->grab().toImage()) < 80);                     // and the screen's again
        QTRY_VERIFY2(w.verdictBanner()->styleSheet().contains(appearance::bannerTone(Fit::OOM, false).background),
                     qPrintable(w.verdictBanner()->styleSheet()));
        QVERIFY(appearance::fitText(Fit::Fits).lightness() > 150); // a light green on dark
        appearance::apply(appearance::Mode::Light);
        QVERIFY(!appearance::isDark());
        QTRY_VERIFY(cornerLightness(chart->grab().toImage()) > 200);
        QTRY_VERIFY(w.verdictBanner()->styleSheet().contains(QStringLiteral("#fde7e9")));
        // Settings: what is stored, and anything else read as "system"
        Settings st;
        st.setAppearance(QStringLiteral("dark"));
        QCOMPARE(Settings().appearance(), QStringLiteral("dark"));
        st.setAppearance(QStringLiteral("purple"));
        QCOMPARE(Settings().appearance(), QStringLiteral("system"));
        QVERIFY(!appearance::named(QStringLiteral("purple")).has_value());
    }

    // Issue 29: the Objective control makes the step DPO (the micro-batch in pairs, the reference
    // beside the policy): a larger peak than SFT's at the same pairs, the choice in the summary
    // and in the comparison's changes; a frozen copy where adapters train is refused in one line.
    void dpoObjectiveFromTheControls()
    {
        Session s;
        MainWindow w(&s);
        w.resize(1280, 800);
        Scenario sc = defaultScenario();
        sc.model = findModelPreset("llama-3.2-1b");
        sc.config.lora.targets = defaultLoraTargets(sc.model);
        sc.config.seqLen = 1024;
        s.setScenario(sc);
        s.recomputeNow();
        const int64_t sft = s.report().estimate.peakAllocatedBytes;
        s.pin();
        auto *objective = w.findChild<QComboBox *>(QStringLiteral("objective"));
        QVERIFY(objective);
        objective->setCurrentIndex(objective->findData(1 + static_cast<int>(Reference::Adapter)));
        QVERIFY(settle(s));
        s.recomputeNow();
        QVERIFY(s.scenario().config.mode == TrainingMode::DPO);
        QVERIFY2(s.report().error.empty(), s.report().error.c_str());
        QVERIFY(s.report().estimate.peakAllocatedBytes > sft);
        QVERIFY(QString::fromStdString(summarize(s.scenario().config)).startsWith(QStringLiteral("DPO (adapter reference)")));
        const auto changes = diffScenarios(*s.pinned(), s.scenario());
        QVERIFY(std::any_of(changes.begin(), changes.end(), [](const ScenarioChange &c) {
            return c.setting == "mode" && c.pinned == "sft" && c.current == "dpo";
        }));
        objective->setCurrentIndex(objective->findData(1 + static_cast<int>(Reference::Copy)));
        QVERIFY(settle(s));
        s.recomputeNow();
        QVERIFY2(QString::fromStdString(s.report().error).contains(QStringLiteral("adapters and a reference copy")),
                 s.report().error.c_str());
        QVERIFY(!QString::fromStdString(s.report().error).contains(QLatin1Char('\n')));
        // issue 29's other modes: each estimated in its own mode, its batch described as it counts
        for (const auto &[text, mode, summary] :
             {std::tuple{"KTO, reference: the adapter disabled", TrainingMode::KTO, "KTO (adapter reference)"},
              std::tuple{"ORPO (no reference)", TrainingMode::ORPO, "ORPO, "},
              std::tuple{"Reward model (sequence classifier)", TrainingMode::Reward, "reward model, "}}) {
            objective->setCurrentIndex(objective->findText(QLatin1String(text)));
            QVERIFY(settle(s));
            s.recomputeNow();
            QVERIFY(s.scenario().config.mode == mode);
            QVERIFY2(s.report().error.empty(), s.report().error.c_str());
            QVERIFY(QString::fromStdString(summarize(s.scenario().config)).startsWith(QLatin1String(summary)));
        }
        // a reward model has no vocabulary logits
        QCOMPARE(s.report().estimate.peak[Category::Logits], int64_t(0));
        // GRPO: its own phases; the KL entry adds the reference's, the vLLM entry its share of the
        // card; the prompt's tokens are a control of their own
        auto *prompt = w.findChild<QSpinBox *>(QStringLiteral("promptLen"));
        QVERIFY(prompt);
        auto *batch = w.findChild<QSpinBox *>(QStringLiteral("microBatch"));
        QVERIFY(batch);
        const int batchBefore = batch->value();
        batch->setValue(4);
        for (const auto &[text, phases, share] : {std::tuple{"GRPO (generates its completions)", size_t(1), 0.0},
                                                  std::tuple{"GRPO with KL to the reference", size_t(2), 0.0},
                                                  std::tuple{"GRPO, vLLM colocated (0.3)", size_t(1), 0.3}}) {
            objective->setCurrentIndex(objective->findText(QLatin1String(text)));
            QVERIFY(settle(s));
            s.recomputeNow();
            QVERIFY(s.scenario().config.mode == TrainingMode::GRPO);
            QVERIFY2(s.report().error.empty(), s.report().error.c_str());
            QCOMPARE(s.report().estimate.rollout.size(), phases);
            QCOMPARE(s.report().estimate.colocatedShare, share);
            QVERIFY(prompt->isEnabled());
        }
        prompt->setValue(256);
        QVERIFY(settle(s));
        QCOMPARE(s.scenario().config.dpo.promptLen, int64_t(256));
        QVERIFY(QString::fromStdString(summarize(s.scenario().config)).contains(QStringLiteral("prompt 256")));
        batch->setValue(batchBefore);
        QVERIFY(settle(s));
        // back to SFT: the same number as before
        objective->setCurrentIndex(0);
        QVERIFY(settle(s));
        s.recomputeNow();
        QCOMPARE(s.report().estimate.peakAllocatedBytes, sft);
    }
};

QTEST_MAIN(TestExplorer)
#include "tst_explorer.moc"
