#include "verdictbanner.h"

#include "appearance.h"

#include <QEvent>

#include "qtutil.h"

#include "headroom/serialize.h"

using namespace headroom;

VerdictBanner::VerdictBanner(Session *session, QWidget *parent)
    : QLabel(parent)
    , m_session(session)
{
    setObjectName(QStringLiteral("verdict"));
    setWordWrap(true);
    setTextFormat(Qt::RichText);
    setMargin(8);
    connect(session, &Session::reportReady, this, &VerdictBanner::refresh);
    connect(session, &Session::unitsChanged, this, &VerdictBanner::refresh);
    connect(session, &Session::selectionChanged, this, &VerdictBanner::refresh);
    connect(session, &Session::traceStatusChanged, this, &VerdictBanner::refresh);
    connect(appearance::notifier(), &appearance::Notifier::changed, this, &VerdictBanner::refresh); // dark or light
    setTextInteractionFlags(Qt::LinksAccessibleByMouse | Qt::LinksAccessibleByKeyboard);
    connect(this, &QLabel::linkActivated, this, [this](const QString &link) {
        const Report &r = m_session->report();
        if (link != QLatin1String("fix") || !r.fix)
            return;
        Scenario s = m_session->scenario();
        s.config = r.fix->config;
        m_session->applyScenario(s, qs(r.fix->title));
    });
    refresh();
}

QString VerdictBanner::compose(const Report &r, const Measurement *m, Unit u, const Scenario &current)
{
    if (!r.error.empty()) {
        QString t = tr("<b>Cannot estimate this configuration.</b> %1").arg(qs(r.error).toHtmlEscaped());
        if (r.fix) // one click to the nearest configuration that can be estimated (undoable)
            t += tr("<br><a href=\"fix\">Change to: %1</a>").arg(qs(r.fix->title).toHtmlEscaped());
        return t;
    }
    const Verdict &v = r.verdict;
    const QString word = v.fit == Fit::Fits ? tr("Fits") : v.fit == Fit::Tight ? tr("Tight") : tr("Out of memory");
    QString t = tr("<b>%1</b> — peak %2 of %3, %4 on %5")
                    .arg(word, qs(formatBytes(v.neededBytes, u, 1)), qs(formatBytes(v.capacityBytes, u, 1)),
                         qs(headroomPhrase(v)), qs(r.scenario.gpu.name).toHtmlEscaped());
    if (v.colocatedBytes > 0) // GRPO with vLLM colocated: its share is out of the step's capacity
        t += tr(" (the card's %1 less %2 its driver keeps and %3 colocated vLLM holds)")
                 .arg(qs(formatBytes(r.scenario.gpu.memoryBytes, u, 1)),
                      qs(formatBytes(r.scenario.gpu.memoryBytes - v.capacityBytes - v.colocatedBytes, u, 1)),
                      qs(formatBytes(v.colocatedBytes, u, 1)));
    else if (r.scenario.gpu.memoryBytes > v.capacityBytes)
        t += tr(" (the card's %1 less %2 its driver keeps)")
                 .arg(qs(formatBytes(r.scenario.gpu.memoryBytes, u, 1)),
                      qs(formatBytes(r.scenario.gpu.memoryBytes - v.capacityBytes, u, 1)));
    if (r.scenario.config.worldSize > 1)
        t += tr(" (per GPU, %1 GPUs, ZeRO-%2)").arg(r.scenario.config.worldSize).arg(r.scenario.config.zeroStage);
    else if (r.scenario.config.zeroStage > 0)
        t += tr(" (one GPU, ZeRO-%1)").arg(r.scenario.config.zeroStage);
    if (v.fit == Fit::Tight)
        t += tr(" — inside the %1% reserve").arg(std::lround(v.reserve * 100));
    t += QLatin1Char('.');
    if (v.cacheFlushes > 0)
        t += tr("<br>Only because %1.").arg(qs(cacheFlushNote(v)).toHtmlEscaped());
    for (const auto &n : r.notes)
        t += QStringLiteral("<br><small>• %1</small>").arg(qs(n).toHtmlEscaped());
    if (m) {
        if (m->oom) {
            t += tr("<br>Measured: <b>OOM in %1 at %2</b> on %3.")
                     .arg(qs(toString(m->oom->phase)), qs(formatBytes(m->oom->inUseBytes, u, 1)),
                          qs(m->deviceName).toHtmlEscaped());
        } else {
            const bool same = toJson(m->config) == toJson(current.config) && m->model.id == current.model.id;
            const double err = same ? estimateError(*m, r.estimate) : 0.0;
            t += tr("<br>Measured on %1: peak allocated %2").arg(qs(m->deviceName).toHtmlEscaped(),
                                                                   qs(formatBytes(m->peakAllocatedBytes, u, 2)));
            // The comparison is of peak allocated, and says so: the bars are device totals, and a
            // CPU step has no CUDA context or allocator slack in its bar (issue 31 row 9)
            const QString estimated = qs(formatBytes(r.estimate.peakAllocatedBytes, u, 2));
            if (!same)
                t += tr(" — for %1, not the current configuration.").arg(qs(summarize(m->config)).toHtmlEscaped());
            else if (std::abs(err) > 0.05)
                t += tr(" — <b>the estimate's, %1, is %2% %3 it</b>.")
                         .arg(estimated)
                         .arg(std::abs(err) * 100.0, 0, 'f', 1)
                         .arg(err < 0 ? tr("under") : tr("over"));
            else if (std::abs(err) < 0.0005)
                t += tr(", the estimate within 0.05% of it.");
            else
                t += tr(", the estimate's, %1, %2% %3 it.")
                         .arg(estimated)
                         .arg(std::abs(err) * 100.0, 0, 'f', 1)
                         .arg(err < 0 ? tr("under") : tr("over"));
            if (m->device == "cpu")
                t += tr(" <small>(a CPU step: tensors only, no CUDA context or allocator slack in its bar)</small>");
            if (m->ranks.size() > 1) {
                const double spread = rankSpread(*m);
                t += tr(" Busiest of %1 ranks (%2)").arg(m->ranks.size()).arg(qs(m->backend));
                t += spread > kUnevenSpread
                         ? tr(": <b>uneven, the largest peak is %1% above the smallest</b>.").arg((spread - 1) * 100, 0, 'f', 1)
                         : tr(", within %1% of each other.").arg((spread - 1) * 100, 0, 'f', 1);
            }
        }
    }
    return t;
}

void VerdictBanner::refresh()
{
    const Report &r = m_session->report();
    const QString tracing = m_session->traceStatus();
    if (!r.error.empty() && !tracing.isEmpty()) { // a model with no row, being traced: not an error
        setText(tr("<b>%1</b><br><small>Its peak comes from your own stack's step, run on fake tensors; every "
                   "other control stays live.</small>")
                    .arg(tracing));
        const appearance::Tone tone = appearance::bannerTone(std::nullopt, false);
        const QString style = QStringLiteral("QLabel { background: %1; color: %2; border-radius: 4px; font-size: 11pt; }")
                                  .arg(tone.background, tone.text);
        if (style != styleSheet())
            setStyleSheet(style);
        return;
    }
    // The quick pass's report has the estimate's notes but not yet the cards' (the full pass
    // adds them): while the advice is on its way the banner keeps its height, so that the chart
    // under it is not laid out and painted twice for every step of a slider (it jumped up and down).
    setMinimumHeight(m_session->adviceIsStale() && isVisible() ? height() : 0);
    setText(compose(r, m_session->selectedMeasurement(), m_session->units(), m_session->scenario()));
    const appearance::Tone tone = appearance::bannerTone(r.verdict.fit, !r.error.empty());
    const QString style = QStringLiteral("QLabel { background: %1; color: %2; border-radius: 4px; font-size: 11pt; }")
                              .arg(tone.background, tone.text);
    if (style != styleSheet()) // re-polishing costs milliseconds; only when the verdict changes
        setStyleSheet(style);
}
