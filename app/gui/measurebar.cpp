#include "measurebar.h"

#include "appearance.h"

#include "qtutil.h"
#include "settings.h"

#include "headroom/protocol.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

using namespace headroom;

MeasureBar::MeasureBar(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_measure(new QPushButton(tr("Measure now"), this))
    , m_device(new QComboBox(this))
    , m_progress(new QProgressBar(this))
    , m_cancel(new QPushButton(tr("Cancel"), this))
    , m_status(new QLabel(this))
    , m_cpuInstead(new QPushButton(tr("Run on the CPU instead"), this))
{
    m_measure->setObjectName(QStringLiteral("measureNow"));
    m_measure->setToolTip(tr("Run one real training step of this configuration with headroom-probe and overlay the result"));
    m_device->setObjectName(QStringLiteral("probeDevice"));
    m_device->addItem(tr("GPU if present"), QStringLiteral("auto"));
    m_device->addItem(tr("GPU (CUDA)"), QStringLiteral("cuda"));
    m_device->addItem(tr("CPU"), QStringLiteral("cpu"));
    m_device->setCurrentIndex(std::max(0, m_device->findData(Settings().probeDevice())));
    m_progress->setObjectName(QStringLiteral("probeProgress"));
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(false);
    m_progress->setMaximumWidth(180);
    m_progress->setMinimumWidth(120);
    // Hidden while idle, but its place is kept: nothing moves when a measurement starts.
    QSizePolicy keep = m_progress->sizePolicy();
    keep.setRetainSizeWhenHidden(true);
    m_progress->setSizePolicy(keep);
    m_cancel->setObjectName(QStringLiteral("cancelProbe"));
    m_status->setObjectName(QStringLiteral("probeStatus"));
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setTextFormat(Qt::PlainText); // the probe's and the engine's words: never rich text
    m_status->installEventFilter(this);          // fitStatus at every width the layout gives it
    m_cpuInstead->setObjectName(QStringLiteral("cpuInstead"));
    m_cpuInstead->hide();
    // The explorer's traces use the same warm worker (Note [Warm worker]): a ready one for the
    // same interpreter, else they start fresh.
    m_session->setTraceWorker([self = QPointer<MeasureBar>(this)](const QString &python) {
        return self ? self->m_worker.socketFor(python) : QString();
    });

    auto *row = new QHBoxLayout(this);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(m_measure);
    row->addWidget(m_device);
    row->addWidget(m_progress);
    row->addWidget(m_cancel);
    row->addWidget(m_status, 1);
    row->addWidget(m_cpuInstead);
    // The controls keep their place when the status text wraps to a second line (a longer status
    // while measuring grew the row and moved Cancel down under the pointer, centred as it was).
    for (QWidget *wgt : {static_cast<QWidget *>(m_measure), static_cast<QWidget *>(m_device),
                         static_cast<QWidget *>(m_progress), static_cast<QWidget *>(m_cancel),
                         static_cast<QWidget *>(m_cpuInstead)})
        row->setAlignment(wgt, Qt::AlignTop);
    setRunning(false);

    connect(m_measure, &QPushButton::clicked, this, &MeasureBar::measure);
    connect(m_cancel, &QPushButton::clicked, this, &MeasureBar::cancel);
    connect(m_cpuInstead, &QPushButton::clicked, this, [this] { measureOn(QStringLiteral("cpu")); });
    connect(m_device, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
        Settings().setProbeDevice(m_device->currentData().toString());
        showPlan();
    });
    connect(&m_readinessWatch, &QFutureWatcher<ProbeReadiness>::finished, this, [this] {
        m_readiness = m_readinessWatch.result();
        m_readinessPending = false;
        showPlan();
        warmWorker();
    });
    checkReadiness();
    connect(appearance::notifier(), &appearance::Notifier::changed, this,
            [this] { showStatus(m_status->text(), m_statusColor); }); // dark or light: the same words, readable

    // A failure belongs to the configuration it was for ("no usable GPU", a refused request): a
    // change of configuration clears it, and the "Run on the CPU instead" offer with it.
    connect(session, &Session::scenarioChanged, this, [this] {
        if (m_runner.isRunning())
            return;
        m_failed = false;
        m_answered = false;
        m_cpuInstead->hide();
        showPlan();
    });
    connect(&m_runner, &ProbeRunner::progress, this, [this](double f, const QString &what) {
        m_progress->setValue(static_cast<int>(f * 1000));
        showStatus(tr("Measuring: %1…").arg(what), nullptr);
    });
    connect(&m_runner, &ProbeRunner::finished, this, [this](const Measurement &m) {
        setRunning(false);
        const Unit u = m_session->units();
        if (m.oom)
            showStatus(tr("Out of memory in %1 at %2 on %3 — shown as a result in Measurements.")
                           .arg(qs(toString(m.oom->phase)), qs(formatBytes(m.oom->inUseBytes, u, 1)), qs(m.deviceName)),
                       "#b3261e");
        else
            showStatus((m_requestedDevice == QLatin1String("auto") && m.device == "cpu"
                            ? tr("No usable GPU, so measured on the CPU (%1) in %2 s: peak allocated %3 (%4); "
                                 "no CUDA context or allocator slack in it.")
                            : tr("Measured on %1 in %2 s: peak allocated %3 (%4)."))
                           .arg(qs(m.deviceName))
                           .arg(m.wallSeconds, 0, 'f', 1)
                           .arg(qs(formatBytes(m.peakAllocatedBytes, u, 2)), qs(toString(m.peakPhase))),
                       "#14532d");
        m_answered = true;
        m_session->addMeasurement(m);
    });
    connect(&m_runner, &ProbeRunner::failed, this, [this](const QString &message, int code) {
        setRunning(false);
        showFailure(message);
        // no usable GPU: CPU mode still measures the step; missing software (no torch, no engine): it
        // cannot, and offering it only fails again (issue 31 row 5)
        m_cpuInstead->setVisible(code == protocol::NoDevice && m_runner.lastErrorField() != QLatin1String("package"));
    });
    connect(&m_runner, &ProbeRunner::stopped, this, [this] {
        setRunning(false);
        m_answered = true;
        showStatus(tr("Stopped."), nullptr);
    });
}

void MeasureBar::warmWorker()
{
    const Settings settings;
    if (!settings.probeWarmWorker() || !settings.probePrefix().isEmpty()) {
        m_worker.stop();
        return;
    }
    if (m_readiness.probe.isEmpty() || m_readiness.torch.isEmpty() || m_readiness.transformers.isEmpty())
        return;
    m_worker.start(m_readiness.probe, settings.probePython());
}

void MeasureBar::checkReadiness()
{
    const Settings settings;
    if (!settings.probePrefix().isEmpty() || m_readinessWatch.isRunning())
        return; // a remote probe: this machine's packages say nothing about that one's
    const QString probe = ProbeRunner::locateProbe(settings.probePath());
    m_readinessPending = true;
    m_readinessWatch.setFuture(QtConcurrent::run(&ProbeReadiness::check, probe, settings.probePython()));
}

void MeasureBar::showPlan()
{
    if (m_runner.isRunning() || m_failed || m_answered)
        return;
    const Settings settings;
    if (!settings.probePrefix().isEmpty()) {
        const QString where = settings.probePrefix().join(QLatin1Char(' '));
        m_measure->setToolTip(tr("Runs one real training step of this configuration through %1").arg(where));
        showStatus(tr("Measure now runs the probe through %1.").arg(where), "#555555");
        return;
    }
    const auto plan = m_readiness.plan(m_session->scenario().model, m_session->scenario().config, settings.probeEngine(),
                                       m_device->currentData().toString());
    const QString text = plan.blocker.isEmpty() ? plan.summary : tr("Cannot measure here: %1.").arg(plan.blocker);
    m_measure->setToolTip(tr("Run one real training step of this configuration with headroom-probe and overlay the "
                             "result.\n%1")
                              .arg(plan.blocker.isEmpty() && !plan.detail.isEmpty() ? plan.detail : text));
    showStatus(text, plan.blocker.isEmpty() ? "#555555" : "#8a5300");
}

QString MeasureBar::statusText() const
{
    return m_status->text();
}

// A long reason (an engine and the packages it needs) wraps to three lines at 1280 wide: the bar
// takes the height the wrapped text needs at the label's width rather than clipping the last line.
void MeasureBar::fitStatus()
{
    const QRect inside = m_status->contentsRect();
    if (inside.width() <= 0)
        return;
    const QRect text = m_status->fontMetrics().boundingRect(QRect(0, 0, inside.width(), 1 << 20),
                                                            Qt::TextWordWrap, m_status->text());
    const int need = text.height() + m_status->height() - inside.height();
    if (m_status->minimumHeight() != need)
        m_status->setMinimumHeight(need);
}

bool MeasureBar::eventFilter(QObject *watched, QEvent *event)
{
    if (watched == m_status && event->type() == QEvent::Resize)
        fitStatus();
    return QWidget::eventFilter(watched, event);
}

void MeasureBar::showStatus(const QString &text, const char *color)
{
    m_status->setText(text);
    fitStatus();
    m_statusColor = color;
    m_status->setStyleSheet(color ? QStringLiteral("color: %1").arg(appearance::readable(QColor(QLatin1String(color))).name())
                                  : QString());
}

// A failure of the last run (in red); the next change of configuration clears it.
void MeasureBar::showFailure(const QString &text)
{
    showStatus(text, "#b3261e");
    m_failed = true;
}

void MeasureBar::setRunning(bool running)
{
    m_measure->setEnabled(!running);
    m_device->setEnabled(!running);
    m_cancel->setEnabled(running);
    m_progress->setVisible(running);
    if (running)
        m_cpuInstead->hide();
}

void MeasureBar::measure()
{
    measureOn(m_device->currentData().toString());
}

void MeasureBar::measureOn(const QString &device)
{
    if (m_runner.isRunning())
        return;
    if (!m_session->report().error.empty()) {
        showFailure(tr("Fix the configuration first: %1").arg(qs(m_session->report().error)));
        return;
    }
    const Settings settings;
    ProbeRunner::Options o;
    o.prefix = settings.probePrefix();
    o.device = device;
    o.steps = settings.probeSteps();
    o.timeoutSeconds = settings.probeTimeoutSeconds();
    // The scenario's allocator settings (what the estimate replays), else Settings' default.
    o.allocConf = m_session->scenario().allocConf.empty() ? settings.probeAllocConf()
                                                           : qs(m_session->scenario().allocConf);
    o.engine = settings.probeEngine();
    o.python = settings.probePython();
    o.shareGpu = settings.probeShareGpu();
    if (o.prefix.isEmpty()) {
        QStringList searched;
        o.program = ProbeRunner::locateProbe(settings.probePath(), &searched);
        if (o.program.isEmpty()) {
            showFailure(tr("headroom-probe was not found (looked at %1). Set its path in Settings, or $HEADROOM_PROBE. "
                           "It is built with LibTorch; see the README.")
                            .arg(searched.join(QStringLiteral(", "))));
            return;
        }
    } else {
        // Remote: the path is the remote machine's, or the probe is on its PATH.
        o.program = settings.probePath().isEmpty() ? QStringLiteral("headroom-probe") : settings.probePath();
    }
    ProbeRequest request;
    request.model = m_session->scenario().model;
    request.config = m_session->scenario().config;
    request.steps = o.steps;
    request.device = device.toStdString();
    m_requestedDevice = device;
    // What the LibTorch engine does not reproduce (other families, accumulation, ZeRO/FSDP...) is
    // measured by the transformers engine instead, and the status says why.
    QString why;
    if (o.engine != QLatin1String("transformers")) {
        if (const auto no = libtorchRefusal(request.model, request.config)) {
            o.engine = QStringLiteral("transformers");
            why = tr(" with the transformers engine (%1 = %2: the LibTorch engine does not reproduce it)")
                      .arg(qs(no->field), qs(no->value));
        }
    }
    request.engine = o.engine.toStdString();
    if (o.engine == QLatin1String("transformers"))
        o.workerSocket = m_worker.socketFor(o.python);
    if (m_runner.start(request, o)) {
        warmWorker(); // one that went idle starts again, for the next run
        setRunning(true);
        showStatus((device == QLatin1String("cpu")
                        ? tr("Measuring on the CPU (the whole model runs in this machine's memory)")
                        : tr("Measuring")) +
                       why + QStringLiteral("…"),
                   nullptr);
    }
}

void MeasureBar::cancel()
{
    m_runner.cancel();
}
