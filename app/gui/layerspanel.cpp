#include "layerspanel.h"

#include "charts.h"
#include "qtutil.h"

#include "headroom/estimator.h"
#include "headroom/layers.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QRegularExpression>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

using namespace headroom;

namespace {

// The moment's event in `t`'s steady step, and what it is called.
std::pair<size_t, QString> momentOf(const Timeline &t, LayersPanel::Moment m)
{
    if (m == LayersPanel::Moment::ForwardEnd)
        return {forwardEndEvent(t, t.steadyStep), QObject::tr("at the end of the forward pass")};
    const size_t at = stepPeakEvent(t, t.steadyStep);
    QString phase;
    for (const PhaseSpan &p : stepPhases(t, t.steadyStep))
        if (at > p.first && at <= p.end)
            phase = qs(label(p.phase));
    return {at, phase.isEmpty() ? QObject::tr("at the step's peak") : QObject::tr("at the step's peak (%1)").arg(phase)};
}

// "Attention" -> "attention" mid-sentence; "LoRA" and "MLP ..." stay as they are written.
QString inSentence(QString name)
{
    const QString word = name.section(QRegularExpression(QStringLiteral("[ ,]")), 0, 0);
    if (word.size() > 1 && word.mid(1) == word.mid(1).toLower())
        name[0] = name[0].toLower();
    return name;
}

std::array<int64_t, kOpKindCount> byKind(const std::vector<LayerUse> &use)
{
    std::array<int64_t, kOpKindCount> out{};
    for (const LayerUse &u : use)
        for (size_t k = 0; k < out.size(); ++k)
            out[k] += u.bytes[k];
    return out;
}

} // namespace

LayersPanel::LayersPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_moment(new QComboBox(this))
    , m_summary(new QLabel(this))
{
    m_moment->setObjectName(QStringLiteral("layersMoment"));
    m_moment->addItem(tr("At the step's peak"), static_cast<int>(Moment::StepPeak));
    m_moment->addItem(tr("At the end of the forward pass"), static_cast<int>(Moment::ForwardEnd));
    m_summary->setObjectName(QStringLiteral("layersSummary"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto *layout = new QVBoxLayout(this);
    auto *head = new QHBoxLayout;
    head->addWidget(new QLabel(tr("Alive"), this));
    head->addWidget(m_moment);
    head->addStretch(1);
    layout->addLayout(head);
    layout->addWidget(m_summary);

    connect(m_moment, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { refresh(); });
    connect(session, &Session::reportReady, this, [this] { refresh(); });
    connect(session, &Session::unitsChanged, this, [this] { refresh(); });
}

void LayersPanel::ensureBody()
{
    // Made when first needed (the tab shown, a picture, a test's look): a chart view costs every
    // window that never opens this tab.
    if (m_chart)
        return;
    m_chart = new LayerChart(this);
    m_kinds = new QTableWidget(this);
    m_kinds->setObjectName(QStringLiteral("layerKinds"));
    m_kinds->verticalHeader()->setVisible(false);
    m_kinds->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_kinds->setAlternatingRowColors(true);
    m_kinds->verticalHeader()->setDefaultSectionSize(m_kinds->fontMetrics().height() + 6);
    m_kinds->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_kinds->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    auto *split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_chart);
    split->addWidget(m_kinds);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 0);
    static_cast<QVBoxLayout *>(layout())->addWidget(split, 1);
}

LayerChart *LayersPanel::chart()
{
    ensureBody();
    return m_chart;
}

QTableWidget *LayersPanel::kinds()
{
    ensureBody();
    return m_kinds;
}

void LayersPanel::setMoment(Moment m)
{
    m_moment->setCurrentIndex(m_moment->findData(static_cast<int>(m)));
}

void LayersPanel::setMeasured(const std::optional<Timeline> &t, const QString &name)
{
    m_measured = t;
    m_measuredName = name;
    refresh();
}

void LayersPanel::showEvent(QShowEvent *e)
{
    QWidget::showEvent(e);
    if (m_dirty)
        refresh();
}

QString LayersPanel::summary() const
{
    return m_summary->text();
}

QPixmap LayersPanel::picture(const QSize &size)
{
    if (m_dirty)
        refresh(true);
    return m_chart->toPixmap(size);
}

void LayersPanel::refresh(bool force)
{
    if (!isVisible() && !force) { // the timeline is simulated when the tab is looked at
        m_dirty = true;
        return;
    }
    m_dirty = false;
    ensureBody();
    const Report &r = m_session->report();
    const Unit u = m_session->units();
    const auto moment = static_cast<Moment>(m_moment->currentData().toInt());
    QStringList kindNames;
    for (OpKind k : kAllOpKinds)
        kindNames << qs(label(k));
    if (!r.error.empty() || !r.scenario.model.estimable) {
        m_summary->setText(r.error.empty() ? tr("No per-layer view: %1 has no modelled row (its estimate is traced).")
                                                 .arg(qs(r.scenario.model.name))
                                           : tr("No estimate: %1").arg(qs(r.error)));
        m_chart->setContent({}, {}, kindNames, u, {});
        m_kinds->setRowCount(0);
        return;
    }
    std::vector<LayerUse> use;
    QString when;
    try {
        const Timeline t = estimateTimeline(r.scenario.model, r.scenario.config, estimatorOptions(r.scenario));
        size_t at = 0;
        std::tie(at, when) = momentOf(t, moment);
        use = liveByLayer(t, at);
    } catch (const std::exception &e) {
        m_summary->setText(tr("No timeline: %1").arg(qs(e.what())));
        return;
    }
    // layers 0..N-1 in order (a layer holding nothing is a zero bar), then what is outside them
    const int layers = static_cast<int>(std::clamp<int64_t>(r.scenario.model.numLayers, 0, 4096));
    QStringList labels;
    std::vector<std::vector<int64_t>> stacked(kOpKindCount, std::vector<int64_t>(static_cast<size_t>(layers) + 1, 0));
    for (int i = 0; i < layers; ++i)
        labels << QString::number(i);
    labels << tr("out"); // outside the layers: the embedding, the final norm, the logits and the loss
    const LayerUse *largest = nullptr;
    int64_t total = 0;
    for (const LayerUse &lu : use) {
        const size_t bar = lu.layer < 0 || lu.layer >= layers ? static_cast<size_t>(layers) : static_cast<size_t>(lu.layer);
        for (size_t k = 0; k < kOpKindCount; ++k)
            stacked[k][bar] += lu.bytes[k];
        total += lu.total();
        if (lu.layer >= 0 && (!largest || lu.total() > largest->total()))
            largest = &lu;
    }
    m_chart->setContent(labels, stacked, kindNames, u,
                        tr("By layer, %1").arg(when));
    // the summary: the total, the largest layer and what it mostly holds, outside the layers
    QString text = tr("<b>%1</b> of activations, logits and temporaries alive %2.")
                       .arg(qs(formatBytes(total, u, 2)), when.toHtmlEscaped());
    if (largest) {
        size_t top = 0;
        for (size_t k = 1; k < kOpKindCount; ++k)
            if (largest->bytes[k] > largest->bytes[top])
                top = k;
        text += tr(" The largest layer is %1 with %2, mostly %3.")
                    .arg(largest->layer)
                    .arg(qs(formatBytes(largest->total(), u, 2)), inSentence(qs(label(kAllOpKinds[top]))));
    }
    if (!use.empty() && use.front().layer < 0)
        text += tr(" Outside the layers (\"out\": embedding, logits, loss): %1.").arg(qs(formatBytes(use.front().total(), u, 2)));
    // By kind, estimated and, with a measured timeline, measured at its own same moment.
    const auto est = byKind(use);
    std::optional<std::array<int64_t, kOpKindCount>> meas;
    if (m_measured) {
        const auto [at, mwhen] = momentOf(*m_measured, moment);
        meas = byKind(liveByLayer(*m_measured, at));
        text += tr(" Beside it by kind: %1 (a recorded run names code lines, not layers).").arg(m_measuredName.toHtmlEscaped());
    }
    m_summary->setText(text);
    QStringList header{tr("Kind of op"), tr("Estimated")};
    if (meas)
        header << tr("Measured");
    m_kinds->setColumnCount(static_cast<int>(header.size()));
    m_kinds->setHorizontalHeaderLabels(header);
    m_kinds->setRowCount(kOpKindCount + 1);
    const auto put = [&](int row, const QString &name, int64_t e, std::optional<int64_t> m) {
        m_kinds->setItem(row, 0, new QTableWidgetItem(name));
        auto *ei = new QTableWidgetItem(qs(formatBytes(e, u, 2)));
        ei->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        m_kinds->setItem(row, 1, ei);
        if (m) {
            auto *mi = new QTableWidgetItem(qs(formatBytes(*m, u, 2)));
            mi->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            m_kinds->setItem(row, 2, mi);
        }
    };
    int64_t measTotal = 0;
    for (int k = 0; k < kOpKindCount; ++k) {
        const auto mk = meas ? std::optional<int64_t>((*meas)[static_cast<size_t>(k)]) : std::nullopt;
        measTotal += mk.value_or(0);
        put(k, kindNames[k], est[static_cast<size_t>(k)], mk);
        m_kinds->item(k, 0)->setData(Qt::DecorationRole, opKindColor(k)); // the chart's legend
    }
    put(kOpKindCount, tr("Total"), total, meas ? std::optional<int64_t>(measTotal) : std::nullopt);
    m_kinds->resizeColumnsToContents();
    m_kinds->setMinimumWidth(m_kinds->horizontalHeader()->length() + 2 * m_kinds->frameWidth() + 4);
}
