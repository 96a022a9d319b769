#include "mainwindow.h"

#include "chartpanel.h"
#include "charts.h"
#include "comparepanel.h"
#include "configpanel.h"
#include "layerspanel.h"
#include "measurebar.h"
#include "measurementspanel.h"
#include "qtutil.h"
#include "recommendationspanel.h"
#include "scalingpanel.h"
#include "timelinepanel.h"
#include "settings.h"
#include "settingsdialog.h"
#include "sheetio.h"
#include "verdictbanner.h"

#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/vision.h"
#include "hubfetch.h"

#include <algorithm>
#include <cstdio>

#include <QApplication>
#include <QCloseEvent>
#include <QDataStream>
#include <QGuiApplication>
#include <QKeyEvent>
#include <QLineEdit>
#include <QAbstractSpinBox>
#include <QScreen>
#include <QDir>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSaveFile>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>

using namespace headroom;

static void initResources()
{
    Q_INIT_RESOURCE(headroom); // the icon lives in the headroom_app static library
}

MainWindow::MainWindow(Session *session, QWidget *parent)
    : QMainWindow(parent)
    , m_session(session)
    , m_config(new ConfigPanel(session, this))
    , m_verdict(new VerdictBanner(session, this))
    , m_chart(new ChartPanel(session, this))
    , m_measure(new MeasureBar(session, this))
    , m_recommendations(new RecommendationsPanel(session, this))
    , m_scaling(new ScalingPanel(session, this))
    , m_timeline(new TimelinePanel(session, this))
    , m_measurements(new MeasurementsPanel(session, this))
    , m_compare(new ComparePanel(session, this))
    , m_layers(new LayersPanel(session, this))
    , m_tabs(new QTabWidget(this))
{
    initResources();
    setWindowIcon(QIcon(QStringLiteral(":/icons/headroom.svg")));
    setAcceptDrops(true);

    auto *scroll = new QScrollArea(this);
    scroll->setWidget(m_config);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    // Never narrower than the form needs with the vertical scroll bar showing (a short window,
    // 1280x800), or its fields are cut off on the right.
    scroll->setMinimumWidth(std::max(340, m_config->minimumSizeHint().width() +
                                              scroll->verticalScrollBar()->sizeHint().width() + 2 * scroll->frameWidth()));

    auto *breakdown = m_breakdownSplit = new QSplitter(Qt::Vertical, this);
    auto *top = new QWidget(breakdown);
    auto *topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addWidget(m_chart, 1);
    topLayout->addWidget(m_measure);
    breakdown->addWidget(top);
    breakdown->addWidget(m_recommendations);
    // The advice is half of the answer: at 1280x800 the list shows five rows, not two.
    breakdown->setStretchFactor(0, 3);
    breakdown->setStretchFactor(1, 2);
    m_tabs->addTab(breakdown, tr("Breakdown"));
    m_tabs->addTab(m_scaling, tr("Scaling"));
    m_tabs->addTab(m_measurements, tr("Measurements"));
    m_tabs->addTab(m_timeline, tr("Timeline"));
    m_tabs->addTab(m_compare, tr("Compare"));
    m_tabs->addTab(m_layers, tr("Layers"));
    // the Timeline tab's measured overlay is set beside the estimate by kind of op
    connect(m_timeline, &TimelinePanel::measuredChanged, this,
            [this] { m_layers->setMeasured(m_timeline->measured(), m_timeline->measuredName()); });

    auto *right = new QWidget(this);
    auto *rightLayout = new QVBoxLayout(right);
    rightLayout->addWidget(m_verdict);
    rightLayout->addWidget(m_tabs, 1);
    auto *split = m_mainSplit = new QSplitter(Qt::Horizontal, this);
    split->addWidget(scroll);
    split->addWidget(right);
    split->setStretchFactor(1, 1);
    setCentralWidget(split);

    connect(m_config, &ConfigPanel::importConfigRequested, this,
            [this] { openInteractively(tr("Import a Hugging Face config.json"), tr("JSON (*.json)")); });
    connect(m_measurements, &MeasurementsPanel::importRequested, this,
            [this] { openInteractively(tr("Import a probe result"), tr("Probe results (*.json *.jsonl);;All files (*)")); });
    connect(session, &Session::measurementsChanged, this, [this] {
        m_tabs->setTabText(2, tr("Measurements (%1)").arg(m_session->measurements().size()));
    });
    connect(session, &Session::pinnedChanged, this, [this] {
        m_tabs->setTabText(static_cast<int>(Tab::Compare), m_session->pinned() ? tr("Compare (pinned)") : tr("Compare"));
    });
    connect(session, &Session::reportReady, this, &MainWindow::updateTitle);
    buildMenus();
    // Every spin box's edit is a session change, undone by the session: its own line edit's text
    // undo would take Ctrl+Z first and do nothing visible (issue 31 row 8).
    for (QAbstractSpinBox *box : findChildren<QAbstractSpinBox *>()) {
        box->installEventFilter(this);
        for (QLineEdit *edit : box->findChildren<QLineEdit *>())
            edit->installEventFilter(this);
    }
    statusBar()->showMessage(tr("Drop a config.json, a probe result or a sheet anywhere in the window."));
    resize(1400, 900); // a window on screen is placed by restoreWindow(); this is for offscreen use
    updateTitle();
}

QRect MainWindow::initialGeometry(const QRect &available, const QSize &minimum)
{
    // a margin for the frame and the desktop's panels that availableGeometry may not count
    const int w = std::max(minimum.width(), std::min(1400, available.width() - 40));
    const int h = std::max(minimum.height(), std::min(900, available.height() - 60));
    QRect r(0, 0, w, h);
    r.moveCenter(available.center());
    r.moveTop(std::max(available.top(), r.top()));
    r.moveLeft(std::max(available.left(), r.left()));
    return r;
}

namespace {
const char *const kTabNames[MainWindow::kTabCount] = {"breakdown", "scaling", "measurements", "timeline", "compare", "layers"};
}

std::optional<MainWindow::Tab> MainWindow::tabNamed(const QString &name)
{
    for (int i = 0; i < kTabCount; ++i)
        if (name == QLatin1String(kTabNames[i]))
            return static_cast<Tab>(i);
    return std::nullopt;
}

QString MainWindow::tabNames()
{
    QStringList names;
    for (const char *n : kTabNames)
        names << QLatin1String(n);
    const QString last = names.takeLast();
    return names.join(QStringLiteral(", ")) + QStringLiteral(" or ") + last;
}

MainWindow::Tab MainWindow::currentTab() const
{
    return static_cast<Tab>(std::clamp(m_tabs->currentIndex(), 0, kTabCount - 1));
}

QByteArray MainWindow::saveLayout() const
{
    QByteArray out;
    QDataStream ds(&out, QIODevice::WriteOnly);
    ds << quint32(0x48524c31) << m_mainSplit->saveState() << m_breakdownSplit->saveState() << qint32(m_tabs->currentIndex());
    return out;
}

bool MainWindow::restoreLayout(const QByteArray &layout)
{
    QDataStream ds(layout);
    quint32 magic = 0;
    QByteArray main, breakdown;
    qint32 tab = 0;
    ds >> magic >> main >> breakdown >> tab;
    if (ds.status() != QDataStream::Ok || magic != 0x48524c31 || tab < 0 || tab >= m_tabs->count())
        return false;
    if (!m_mainSplit->restoreState(main) || !m_breakdownSplit->restoreState(breakdown))
        return false;
    m_tabs->setCurrentIndex(tab);
    return true;
}

void MainWindow::restoreWindow()
{
    const Settings settings;
    const QByteArray geometry = settings.windowGeometry();
    // restoreGeometry moves a window that would be off every screen back onto one
    if (geometry.isEmpty() || !restoreGeometry(geometry)) {
        if (const QScreen *screen = QGuiApplication::primaryScreen())
            setGeometry(initialGeometry(screen->availableGeometry(), minimumSizeHint()));
    }
    if (const QByteArray layout = settings.windowLayout(); !layout.isEmpty())
        restoreLayout(layout);
}

void MainWindow::buildMenus()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open…"), QKeySequence::Open, this, [this] {
        openInteractively(tr("Open a sheet, a probe result or a config.json"), tr("JSON (*.json *.jsonl);;All files (*)"));
    });
    m_recentMenu = file->addMenu(tr("Open &recent"));
    connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::fillRecentMenu);
    fillRecentMenu();
    file->addAction(tr("&Save sheet"), QKeySequence::Save, this, [this] {
        if (m_sheetPath.isEmpty())
            saveAs();
        else
            reportProblem(exportTo(m_sheetPath));
    });
    file->addAction(tr("Save sheet &as…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this, &MainWindow::saveAs);
    file->addAction(tr("&Export…"), QKeySequence(Qt::CTRL | Qt::Key_E), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export budget sheet"), QStringLiteral("budget.pdf"),
                                                          sheetio::filterString());
        if (!path.isEmpty())
            reportProblem(exportTo(path));
    });
    file->addSeparator();
    file->addAction(tr("Import &config.json…"), this,
                    [this] { openInteractively(tr("Import a Hugging Face config.json"), tr("JSON (*.json)")); });
    file->addAction(tr("Import &measurement…"), this, [this] {
        openInteractively(tr("Import a probe result"), tr("Probe results (*.json *.jsonl);;All files (*)"));
    });
    file->addAction(tr("Import &training config…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Import a training config"), QString(),
            tr("Training configs: Axolotl, LLaMA-Factory, accelerate, DeepSpeed, Trainer (*.yml *.yaml *.json);;All files (*)"));
        if (!path.isEmpty())
            reportProblem(importTrainingConfig(path));
    });
    file->addAction(tr("Export training con&fig…"), this, [this] {
        QStringList filters;
        for (TrainingFormat f : kAllTrainingFormats)
            filters << qs(std::string(describe(f))) +
                           (f == TrainingFormat::DeepSpeed || f == TrainingFormat::Trainer ? QStringLiteral(" (*.json)")
                                                                                           : QStringLiteral(" (*.yaml *.yml)"));
        QString chosen;
        const QString path = QFileDialog::getSaveFileName(this, tr("Export a training config"), QStringLiteral("train.yaml"),
                                                          filters.join(QStringLiteral(";;")), &chosen);
        if (path.isEmpty())
            return;
        const int i = std::max<qsizetype>(0, filters.indexOf(chosen));
        reportProblem(exportTrainingConfig(path, kAllTrainingFormats[i]));
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu *edit = menuBar()->addMenu(tr("&Edit"));
    QAction *undo = m_session->undoStack()->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    QAction *redo = m_session->undoStack()->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);
    edit->addAction(tr("Copy scaling table"), m_scaling, &ScalingPanel::copyTable);

    QMenu *measure = menuBar()->addMenu(tr("&Measure"));
    measure->addAction(tr("Measure &now"), QKeySequence(Qt::CTRL | Qt::Key_M), m_measure, &MeasureBar::measure);
    measure->addAction(tr("Measure on the &CPU"), m_measure, [this] { m_measure->measureOn(QStringLiteral("cpu")); });
    measure->addAction(tr("&Cancel"), m_measure, &MeasureBar::cancel);
    measure->addSeparator();
    measure->addAction(tr("&Settings…"), this, [this] { SettingsDialog(this).exec(); });

    QMenu *view = menuBar()->addMenu(tr("&View"));
    const std::pair<Tab, QString> tabs[] = {{Tab::Breakdown, tr("&Breakdown")}, {Tab::Scaling, tr("&Scaling")},
                                            {Tab::Measurements, tr("&Measurements")}, {Tab::Timeline, tr("&Timeline")},
                                            {Tab::Compare, tr("&Compare")}, {Tab::Layers, tr("&Layers")}};
    for (const auto &[t, name] : tabs) // Ctrl+1 ... Ctrl+6
        view->addAction(name, QKeySequence(Qt::CTRL | (Qt::Key_1 + static_cast<int>(t))), this, [this, t = t] { showTab(t); });
    view->addSeparator();
    view->addAction(tr("&Pin for comparison"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P), this, [this] {
        m_session->pin();
        showTab(Tab::Compare);
        statusBar()->showMessage(tr("Pinned: change anything, and the Compare tab sets the two side by side."), 8000);
    });
    view->addAction(tr("&Unpin"), m_session, &Session::unpin);

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("How Headroom &budgets memory"), QKeySequence(Qt::Key_F1), this, [this] {
        QMessageBox box(QMessageBox::Information, tr("How Headroom budgets memory"),
                        tr("<b>Budget the peak, not the average.</b> Within one training step memory rises through "
                           "the forward pass (activations pile up), again in backward (gradients), changes at the "
                           "optimizer step (its state) and drops after zero_grad. Headroom runs that step op by op "
                           "and replays every allocation through a model of PyTorch's caching allocator, so the "
                           "number is the peak <i>reserved</i> plus the CUDA context: what nvidia-smi shows.<br><br>"
                           "<b>Static + dynamic &lt; usable.</b> The static base is weights, gradients and optimizer "
                           "state; the dynamic pool is activations, logits, temporaries and the allocator's slack. "
                           "Their peak must stay under the card less a reserve (10–15%: longer samples, "
                           "fragmentation, other processes).<br><br>"
                           "<b>Fix in order.</b> First cut the dynamic peak (micro-batch with accumulation, "
                           "checkpointing, the fused loss, shorter sequences), then the static base (8-bit or paged "
                           "optimizers, LoRA/QLoRA, offload), and only then shard across GPUs. The recommendations "
                           "are listed in that order.<br><br>"
                           "<b>Then measure.</b> <i>Measure now</i> runs a real step of the same configuration on "
                           "this machine's GPU and overlays it on the estimate; re-measure after any change to the "
                           "model, the sequence length, the optimizer or the parallelism."),
                        QMessageBox::Ok, this);
        box.exec();
    });
    help->addAction(tr("&About Headroom"), this, [this] {
        QMessageBox::about(this, tr("About Headroom"),
                           tr("<b>Headroom %1</b><br>GPU memory budgets for training runs, estimated op by op and "
                              "measured by a real step.")
                               .arg(QStringLiteral(HEADROOM_VERSION)));
    });
}

void MainWindow::saveAs()
{
    const QString start = m_sheetPath.isEmpty() ? QStringLiteral("budget.json") : m_sheetPath;
    const QString path = QFileDialog::getSaveFileName(this, tr("Save budget sheet as"), start, tr("JSON sheet (*.json)"));
    if (!path.isEmpty())
        reportProblem(exportTo(path));
}

void MainWindow::remember(const QString &path)
{
    Settings().addRecentFile(QFileInfo(path).absoluteFilePath());
}

void MainWindow::fillRecentMenu()
{
    m_recentMenu->clear();
    const QStringList files = Settings().recentFiles();
    for (const QString &path : files) {
        QAction *a = m_recentMenu->addAction(QFileInfo(path).fileName(), this, [this, path] { reportProblem(openFile(path)); });
        a->setToolTip(path);
        a->setStatusTip(path);
        a->setEnabled(QFileInfo::exists(path)); // moved or deleted since: shown, not openable
    }
    if (files.isEmpty())
        m_recentMenu->addAction(tr("(none yet)"))->setEnabled(false);
}

void MainWindow::openInteractively(const QString &caption, const QString &filter)
{
    const QString path = QFileDialog::getOpenFileName(this, caption, QString(), filter);
    if (!path.isEmpty())
        reportProblem(openFile(path));
}

void MainWindow::reportProblem(const QString &problem)
{
    if (problem.isEmpty())
        return;
    statusBar()->showMessage(problem, 10000);
    QMessageBox box(QMessageBox::Warning, tr("Headroom"), problem, QMessageBox::Ok, this);
    box.setTextFormat(Qt::PlainText); // a file's words: never rich text (issue 32, row 8)
    box.exec();
}

QString MainWindow::openFile(const QString &path)
{
    try {
        switch (sheetio::sniff(path)) {
        case sheetio::FileKind::Sheet:
            m_session->restore(sheetio::readSheet(path));
            m_sheetPath = path;
            break;
        case sheetio::FileKind::Measurement:
            m_session->addMeasurement(sheetio::readMeasurement(path));
            break;
        case sheetio::FileKind::ModelConfig:
            m_config->addImportedModel(sheetio::readModelConfig(path));
            break;
        case sheetio::FileKind::TrainingConfig:
            return importTrainingConfig(path);
        }
    } catch (const std::exception &e) {
        return tr("Cannot open %1: %2").arg(QFileInfo(path).fileName(), qs(e.what()));
    }
    remember(path);
    updateTitle();
    statusBar()->showMessage(tr("Opened %1").arg(QFileInfo(path).fileName()), 5000);
    return {};
}

QString MainWindow::exportTo(const QString &path)
{
    const auto format = sheetio::formatFor(path);
    if (!format)
        return tr("Cannot export to %1: use .pdf, .html, .md, .csv, .json or .png").arg(QFileInfo(path).fileName());
    m_session->recomputeNow(); // the sheet describes exactly what is on screen
    // A comparison sheet's picture is the comparison's: the pinned and the current bar.
    const QPixmap chart = m_session->pinned() ? m_compare->picture(QSize(900, 520)) : m_chart->chart()->toPixmap(QSize(900, 520));
    const QString problem =
        sheetio::exportSheet(path, *format, m_session->toSheet(), chart, m_timeline->picture(QSize(900, 460)));
    if (problem.isEmpty()) {
        if (*format == sheetio::Format::Json) {
            m_sheetPath = path;
            remember(path);
            updateTitle();
        }
        statusBar()->showMessage(tr("Saved %1").arg(QFileInfo(path).fileName()), 5000);
    }
    return problem;
}

namespace {
// What the file left unstated and the import set back to Headroom's default, where that differs
// from the scenario before it (issue 28: an import is whole; nothing of the old state stays).
QStringList defaultsTaken(const TrainingSettings &st, const TrainingConfig &before, const TrainingConfig &after)
{
    QStringList out;
    auto add = [&](bool stated, bool changed, const QString &what) {
        if (!stated && changed)
            out << what;
    };
    add(st.finetune.has_value(), before.finetune != after.finetune,
        QObject::tr("fine-tuning %1").arg(qs(std::string(toString(after.finetune)))));
    add(st.precision.has_value(), before.precision != after.precision,
        QObject::tr("precision %1").arg(qs(std::string(toString(after.precision)))));
    add(st.optimizer.has_value(), before.optimizer != after.optimizer,
        QObject::tr("optimizer %1").arg(qs(std::string(toString(after.optimizer)))));
    if (after.finetune != FineTune::Full)
        add(st.loraRank.has_value(), before.lora.rank != after.lora.rank, QObject::tr("LoRA rank %1").arg(after.lora.rank));
    add(st.microBatch.has_value(), before.microBatch != after.microBatch,
        QObject::tr("micro batch %1").arg(after.microBatch));
    add(st.seqLen.has_value(), before.seqLen != after.seqLen, QObject::tr("sequence %1").arg(after.seqLen));
    add(st.gradAccum.has_value(), before.gradAccum != after.gradAccum,
        QObject::tr("gradient accumulation %1").arg(after.gradAccum));
    add(st.gradCheckpointing.has_value(), before.gradCheckpointing != after.gradCheckpointing,
        after.gradCheckpointing ? QObject::tr("checkpointing on") : QObject::tr("checkpointing off"));
    add(st.attention.has_value(), before.attention != after.attention,
        QObject::tr("attention %1").arg(qs(std::string(toString(after.attention)))));
    add(st.worldSize.has_value(), before.worldSize != after.worldSize, QObject::tr("%n GPU(s)", nullptr, after.worldSize));
    add(st.zeroStage.has_value(), before.zeroStage != after.zeroStage, QObject::tr("ZeRO %1").arg(after.zeroStage));
    add(st.offloadOptimizer.has_value(), before.offloadOptimizer != after.offloadOptimizer,
        after.offloadOptimizer ? QObject::tr("optimizer offload on") : QObject::tr("optimizer offload off"));
    add(st.activationOffload.has_value(), before.activationOffload != after.activationOffload,
        after.activationOffload ? QObject::tr("activation offload on") : QObject::tr("activation offload off"));
    add(st.loss.has_value(), before.loss != after.loss, QObject::tr("loss %1").arg(qs(std::string(toString(after.loss)))));
    return out;
}
} // namespace

QString MainWindow::importTrainingConfig(const QString &path)
{
    const QString name = QFileInfo(path).fileName();
    TrainingImport in;
    try {
        in = headroom::importTrainingConfigFile(path.toStdString());
    } catch (const std::exception &e) {
        return tr("Cannot import %1: %2").arg(name, qs(e.what()));
    }
    QStringList notes;
    if (!in.settings.model) {
        // A DeepSpeed or accelerate file alone: its settings with the model on screen, said.
        notes << tr("%1 names no model: estimated for %2, the model on screen.").arg(name, qs(m_session->scenario().model.name));
        const QString problem = applyImport(in, m_session->scenario().model, path, notes);
        emit importFinished(problem);
        return problem;
    }
    // A local model is a folder with a config.json, or the file, next to the training config or
    // under the working folder; anything else is a Hub id (or says why it is not).
    const QString model = qs(*in.settings.model);
    QString local;
    for (const QFileInfo &at : {QFileInfo(QFileInfo(path).dir(), model), QFileInfo(model)})
        if (local.isEmpty() && (at.exists() || at.isSymLink()))
            local = at.absoluteFilePath();
    if (!local.isEmpty()) {
        QString problem;
        try { // a model folder or config.json only (issue 32, row 9): never another file, nor a FIFO
            const std::string config = recipeModelConfigPath(local.toStdString(), "base_model");
            problem = applyImport(in, sheetio::readModelConfig(qs(config)), path, notes);
        } catch (const std::exception &e) {
            problem = tr("Cannot import %1: the model %2 was not loaded: %3").arg(name, model, qs(e.what()));
        }
        emit importFinished(problem);
        return problem;
    }
    // A Hub id: a preset, the cache, then the Hub, off the GUI thread; nothing changes until it
    // is known, and nothing at all if it cannot be.
    m_importing = path;
    statusBar()->showMessage(tr("Importing %1: looking up %2…").arg(name, model));
    lookUpModel(this, model.toStdString(), "base_model", [this, in, path, name, notes](const ModelLookup &f) mutable {
        if (m_importing != path)
            return; // another import since
        m_importing.clear();
        QString problem;
        if (!f.model) {
            problem = tr("Cannot import %1: %2").arg(name, f.error);
        } else {
            for (const auto &n : f.notes)
                notes << qs(n);
            problem = applyImport(in, *f.model, path, notes);
        }
        if (!problem.isEmpty()) { // said where the import was asked for, without a modal box
            m_config->showNotes({problem});
            statusBar()->showMessage(problem, 15000);
        }
        emit importFinished(problem);
    });
    return {};
}

QString MainWindow::applyImport(const TrainingImport &in, const ModelArch &named, const QString &path, QStringList notes)
{
    const QString name = QFileInfo(path).fileName();
    const Scenario before = m_session->scenario();
    Scenario s = before; // the card, its reserve and the units are the user's, not the recipe's
    TrainingConfig c; // Headroom's defaults, then what the file states
    in.settings.applyTo(c);
    ModelArch model = named;
    // Note [Vision build]; taken only for the tool's loader, the recipe's data is text: no images assumed
    const bool textData = c.vision.isDefault();
    std::optional<std::string> build;
    try {
        build = takeVisionBuild(model, c, in.settings.wholeCheckpoint);
    } catch (const std::exception &e) {
        return tr("Cannot import %1: %2").arg(name, qs(e.what()));
    }
    if (build)
        notes << qs(*build);
    s.model = model;
    c.lora.targets = defaultLoraTargets(model);
    in.settings.applyTo(c);
    if (!in.settings.seqLen)
        c.seqLen = seqLenFor(model, c.seqLen);
    if (!(build && textData))
        if (const auto assumed = assumeRecipeImages(model, c)) // Note [Recipe images]
            notes << qs(*assumed + " (Images and video)");
    try {
        c.validate();
    } catch (const std::exception &e) {
        return tr("Cannot import %1: %2").arg(name, qs(e.what()));
    }
    s.config = c;
    m_config->rememberModel(model);
    m_session->applyScenario(s, tr("Import %1").arg(name));
    auto joined = [](const std::vector<std::string> &keys) {
        QStringList list;
        for (const auto &k : keys)
            list << qs(k);
        return list.join(QStringLiteral(", "));
    };
    if (!in.unknownKeys.empty())
        notes << tr("Not understood, so not used (they may change memory; the estimate does not follow them): %1")
                     .arg(joined(in.unknownKeys));
    if (!in.neutralKeys.empty())
        notes << tr("Not used, and no effect on memory (data, logging, schedule): %1").arg(joined(in.neutralKeys));
    for (const auto &c2 : in.conflicts)
        notes << tr("Conflict: %1").arg(qs(c2));
    for (const auto &n : in.notes)
        notes << qs(n);
    if (in.shardsWithoutGpuCount)
        notes << tr("The file shards but does not say over how many GPUs: set the GPU count.");
    if (const QStringList taken = defaultsTaken(in.settings, before.config, c); !taken.isEmpty())
        notes << tr("Not in the file, so Headroom's default: %1").arg(taken.join(QStringLiteral(", ")));
    m_config->showNotes(notes);
    statusBar()->showMessage(tr("Imported %1 (%2)").arg(name, qs(std::string(describe(in.format)))), 8000);
    return {};
}

QString MainWindow::exportTrainingConfig(const QString &path, TrainingFormat format)
{
    const Scenario &s = m_session->scenario();
    std::vector<std::string> notes;
    const std::string model = s.model.source.empty() ? s.model.id : s.model.source;
    const std::string text = headroom::exportTrainingConfig(format, model, s.config, &notes);
    QStringList shown;
    for (const auto &n : notes)
        shown << qs(n);
    m_config->showNotes(shown); // what the format cannot say exactly
    if (const QString problem = sheetio::writeAtomic(path, QByteArray::fromStdString(text)); !problem.isEmpty())
        return problem;
    statusBar()->showMessage(tr("Exported %1 as %2").arg(QFileInfo(path).fileName(), qs(std::string(describe(format)))), 8000);
    return {};
}

void MainWindow::showTab(Tab t)
{
    m_tabs->setCurrentIndex(static_cast<int>(t));
}

void MainWindow::updateTitle()
{
    // the sheet's file name first where there is one, as desktop applications do
    const QString model = qs(m_session->scenario().model.name);
    setWindowTitle(m_sheetPath.isEmpty() ? tr("%1 — Headroom").arg(model)
                                         : tr("%1 (%2) — Headroom").arg(QFileInfo(m_sheetPath).fileName(), model));
}

void MainWindow::dragEnterEvent(QDragEnterEvent *e)
{
    const auto urls = e->mimeData()->urls();
    if (!urls.isEmpty() && urls.first().isLocalFile())
        e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent *e)
{
    for (const QUrl &url : e->mimeData()->urls())
        if (url.isLocalFile())
            reportProblem(openFile(url.toLocalFile()));
}

bool MainWindow::eventFilter(QObject *watched, QEvent *event)
{
    if (event->type() == QEvent::ShortcutOverride) {
        auto *key = static_cast<QKeyEvent *>(event);
        if (key->matches(QKeySequence::Undo) || key->matches(QKeySequence::Redo)) {
            event->ignore(); // not the edit's: the window's Undo / Redo shortcut takes it
            return true;
        }
    }
    return QMainWindow::eventFilter(watched, event);
}

void MainWindow::closeEvent(QCloseEvent *e)
{
    Settings s;
    s.setLastScenario(m_session->scenario());
    if (!s.saveSession(m_session->toSheet()))
        std::fprintf(stderr, "headroom: the session could not be kept in %s\n", qPrintable(Settings::sessionPath()));
    s.setUnits(m_session->units());
    s.setWindowGeometry(saveGeometry());
    s.setWindowLayout(saveLayout());
    m_measure->cancel();
    QMainWindow::closeEvent(e);
}
