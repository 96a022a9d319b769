#include "timelinepanel.h"

#include "charts.h"
#include "qtutil.h"

#include "headroom/files.h"
#include "headroom/error.h"
#include "headroom/sheet.h"

#include "settings.h"

#include <QCoreApplication>
#include <QFileDialog>
#include <QProcess>
#include <QTemporaryDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

using namespace headroom;

namespace {

std::vector<std::vector<int64_t>> byCategory(const std::vector<TimelineSample> &samples)
{
    std::vector<std::vector<int64_t>> out(kCategoryCount);
    for (const auto &s : samples)
        for (size_t c = 0; c < kCategoryCount; ++c)
            out[c].push_back(s.bytes[c]);
    return out;
}

QString phaseLabel(Phase p)
{
    return QString::fromLatin1(toString(p).data());
}

} // namespace

TimelinePanel::TimelinePanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_chart(new TimelineChart(this))
    , m_source(new QLabel(this))
    , m_details(new QLabel(this))
{
    auto *layout = new QVBoxLayout(this);
    auto *head = new QHBoxLayout;
    m_source->setWordWrap(true);
    m_source->setObjectName(QStringLiteral("timelineSource"));
    head->addWidget(m_source, 1);
    auto *open = new QPushButton(tr("Overlay a measured timeline…"), this);
    open->setObjectName(QStringLiteral("openTimeline"));
    open->setToolTip(tr("A probe_timeline JSON (headroom-probe --timeline FILE), or a PyTorch memory snapshot "
                        "from your own training (torch.cuda.memory._dump_snapshot, *.pickle)"));
    head->addWidget(open);
    layout->addLayout(head);
    layout->addWidget(m_chart, 1);
    m_details->setObjectName(QStringLiteral("timelineDetails"));
    m_details->setWordWrap(true);
    m_details->setTextFormat(Qt::RichText);
    m_details->setText(tr("Hover the chart to list the largest tensors alive at that moment."));
    layout->addWidget(m_details);
    connect(open, &QPushButton::clicked, this, &TimelinePanel::chooseFile);
    connect(m_chart, &TimelineChart::hovered, this, &TimelinePanel::showDetailsAt);
    connect(session, &Session::reportReady, this, [this] { refresh(); });
    connect(session, &Session::unitsChanged, this, [this] { refresh(); });
}

void TimelinePanel::showEvent(QShowEvent *e)
{
    QWidget::showEvent(e);
    if (m_dirty)
        refresh();
}

namespace {

// The transformers engine's script, where headroom-probe looks for it too.
QString engineScript()
{
    const QString env = qEnvironmentVariable("HEADROOM_ENGINE_SCRIPT");
    if (!env.isEmpty())
        return env;
    const QString dir = QCoreApplication::applicationDirPath();
    for (const QString &rel : {QStringLiteral("/headroom_engine.py"), QStringLiteral("/../probes/headroom_engine.py"),
                               QStringLiteral("/../../probes/headroom_engine.py"),
                               QStringLiteral("/../share/headroom/headroom_engine.py")})
        if (QFileInfo::exists(dir + rel))
            return QFileInfo(dir + rel).canonicalFilePath();
    return {};
}

} // namespace

// A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) goes through the transformers
// engine's converter, in the Python interpreter of Settings: Python's own unpickler reads it, so
// the GUI never parses a pickle.
QString TimelinePanel::convertSnapshot(const QString &path, const QString &out)
{
    // A FIFO or a device named .pickle would hold the converter until its timeout (issue 32,
    // row 10): refused before it starts, as every file Headroom reads is.
    requireRegularFile(path.toStdString(), "snapshot", uint64_t(4) << 30);
    const QString script = engineScript();
    if (script.isEmpty())
        return tr("snapshot = %1: the converter (headroom_engine.py) was not found; set HEADROOM_ENGINE_SCRIPT").arg(path);
    const Settings settings;
    const QString python = !settings.probePython().isEmpty() ? settings.probePython()
                           : qEnvironmentVariableIsEmpty("HEADROOM_PYTHON") ? QStringLiteral("python3")
                                                                             : qEnvironmentVariable("HEADROOM_PYTHON");
    QProcess p;
    p.start(python, {script, QStringLiteral("--convert-snapshot"), path, QStringLiteral("--out"), out});
    if (!p.waitForStarted(10000))
        return tr("snapshot = %1: cannot start %2 to convert it (set the interpreter in Measure → Settings)").arg(path, python);
    if (!p.waitForFinished(120000)) {
        p.kill();
        p.waitForFinished(2000);
        return tr("snapshot = %1: its conversion took more than two minutes").arg(path);
    }
    if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        QString why = QString::fromUtf8(p.readAllStandardError()).trimmed();
        why = why.section(QLatin1Char('\n'), -1).left(300);
        return why.isEmpty() ? tr("snapshot = %1: the converter failed (exit %2)").arg(path).arg(p.exitCode()) : why;
    }
    return {};
}

QString TimelinePanel::openMeasured(const QString &path)
{
    try {
        QString file = path;
        QTemporaryDir tmp;
        if (path.endsWith(QStringLiteral(".pickle"), Qt::CaseInsensitive) ||
            path.endsWith(QStringLiteral(".pkl"), Qt::CaseInsensitive)) {
            file = tmp.filePath(QStringLiteral("timeline.json"));
            if (const QString problem = convertSnapshot(path, file); !problem.isEmpty())
                return problem;
        }
        Timeline t = readTimelineFile(file.toStdString());
        if (stepPhases(t, t.steadyStep).empty())
            return tr("%1: the timeline has no steady step (step %2) to draw").arg(path).arg(t.steadyStep);
        m_measured = std::move(t);
        m_measuredName = tr("measured: %1").arg(QFileInfo(path).fileName());
    } catch (const std::exception &e) {
        return QString::fromStdString(e.what());
    }
    m_dirty = true;
    refresh();
    emit measuredChanged();
    return {};
}

void TimelinePanel::chooseFile()
{
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Measured timeline"), QString(),
        tr("Probe timeline or PyTorch memory snapshot (*.json *.pickle *.pkl);;All files (*)"));
    if (path.isEmpty())
        return;
    const QString problem = openMeasured(path);
    if (!problem.isEmpty())
        m_details->setText(tr("<b>Not opened:</b> %1").arg(problem.toHtmlEscaped()));
}

QPixmap TimelinePanel::picture(const QSize &size)
{
    if (m_dirty)
        refresh(true);
    return m_estimate.events.empty() ? QPixmap() : m_chart->toPixmap(size);
}

void TimelinePanel::refresh(bool force)
{
    if (!isVisible() && !force) {
        m_dirty = true;
        return;
    }
    m_dirty = false;
    const Report &r = m_session->report();
    if (!r.error.empty()) {
        m_source->setText(tr("No estimate: %1").arg(qs(r.error).toHtmlEscaped()));
        m_chart->setContent({}, {}, {}, {}, {}, m_session->units());
        return;
    }
    const Scenario &s = r.scenario;
    std::vector<double> x;
    std::vector<TimelineBand> bands;
    std::vector<TimelineSample> samples;
    try {
        m_estimate = estimateTimeline(s.model, s.config, estimatorOptions(s));
        const std::vector<PhaseSpan> phases = stepPhases(m_estimate, m_estimate.steadyStep);
        m_first = phases.empty() ? 0 : phases.front().first;
        for (const PhaseSpan &p : phases)
            bands.push_back({double(p.first - m_first), double(p.end - m_first), phaseLabel(p.phase)});
        samples = stackedSamples(m_estimate, m_estimate.steadyStep, 1500);
        for (const auto &smp : samples)
            x.push_back(double(smp.event - m_first));
    } catch (const std::exception &e) {
        m_source->setText(tr("No timeline: %1").arg(QString::fromStdString(e.what()).toHtmlEscaped()));
        return;
    }
    // The measured run, phase by phase onto the estimate's axis (the two streams differ in length).
    std::vector<std::pair<double, int64_t>> measured;
    if (m_measured) {
        const auto mp = stepPhases(*m_measured, m_measured->steadyStep);
        for (const auto &smp : stackedSamples(*m_measured, m_measured->steadyStep, 1500)) {
            int64_t total = 0;
            for (auto b : smp.bytes)
                total += b;
            for (size_t j = 0; j < mp.size(); ++j) {
                if (smp.event < mp[j].first || smp.event >= mp[j].end)
                    continue;
                const double frac = double(smp.event - mp[j].first) / double(std::max<size_t>(1, mp[j].end - mp[j].first));
                double px;
                if (mp.size() == bands.size())
                    px = bands[j].from + frac * (bands[j].to - bands[j].from);
                else // different phase structure: spread over the whole step
                    px = (double(smp.event - mp.front().first) / double(std::max<size_t>(1, mp.back().end - mp.front().first))) *
                         (bands.empty() ? 1.0 : bands.back().to);
                measured.emplace_back(px, total);
                break;
            }
        }
    }
    m_chart->setContent(x, byCategory(samples), measured, m_measuredName, bands, m_session->units());
    int64_t peak = 0;
    for (const auto &smp : samples) {
        int64_t t = 0;
        for (auto b : smp.bytes)
            t += b;
        peak = std::max(peak, t);
    }
    m_source->setText(tr("<b>Estimate</b> of %1 on %2: step %3, %4 allocations and frees, peak %5 allocated%6.")
                          .arg(qs(s.model.name).toHtmlEscaped(), qs(s.gpu.name).toHtmlEscaped())
                          .arg(m_estimate.steadyStep)
                          .arg(bands.empty() ? 0 : qlonglong(bands.back().to))
                          .arg(qs(formatBytes(peak, m_session->units(), 2)))
                          .arg(m_measured ? tr("; the line is %1").arg(m_measuredName.toHtmlEscaped()) : QString()));
}

void TimelinePanel::showDetailsAt(double x)
{
    if (m_estimate.events.empty())
        return;
    const size_t ev = std::min(m_estimate.events.size(), m_first + static_cast<size_t>(std::max(0.0, x)));
    QString phase;
    for (const PhaseSpan &p : stepPhases(m_estimate, m_estimate.steadyStep))
        if (ev >= p.first && ev < p.end)
            phase = phaseLabel(p.phase);
    QStringList items;
    for (const LiveTensor &t : largestLiveAt(m_estimate, ev + 1, 6))
        items << tr("%1 %2 (%3%4)")
                     .arg(qs(formatBytes(t.bytes, m_session->units(), 2)), QString::fromLatin1(toString(t.category).data()),
                          qs(t.op).toHtmlEscaped(), t.layer >= 0 ? tr(", layer %1").arg(t.layer) : QString());
    m_details->setText(tr("<b>%1, allocation %2</b> — largest alive: %3")
                           .arg(phase)
                           .arg(qlonglong(ev - m_first))
                           .arg(items.join(QStringLiteral("; "))));
}

QString TimelinePanel::details() const
{
    return m_details->text();
}
