#include "comparepanel.h"

#include "appearance.h"
#include "charts.h"
#include "qtutil.h"

#include "headroom/budget.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

using namespace headroom;

namespace {

QTableWidget *table(const QString &name, const QStringList &header, QWidget *parent)
{
    auto *t = new QTableWidget(parent);
    t->setObjectName(name);
    t->setColumnCount(static_cast<int>(header.size()));
    t->setHorizontalHeaderLabels(header);
    t->verticalHeader()->setVisible(false);
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->setAlternatingRowColors(true);
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    t->horizontalHeader()->setStretchLastSection(true);
    t->setWordWrap(false);
    t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6); // 13 rows fit at 1280x800
    return t;
}

QTableWidgetItem *cell(const QString &text, bool number)
{
    auto *item = new QTableWidgetItem(text);
    item->setToolTip(text);
    if (number)
        item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

// "Pinned: Llama-3.1-8B, LoRA r16, ..." and, under it, the verdict in the banner's words and
// colour; or the report's error.
void showVerdict(QLabel *label, const QString &which, const Report &r, Unit u)
{
    if (!r.error.empty()) {
        label->setText(which + QStringLiteral(": ") + qs(r.error));
        label->setStyleSheet({});
        return;
    }
    label->setText(QStringLiteral("%1: %2, %3\n%4")
                       .arg(which, qs(r.scenario.model.name), qs(summarize(r.scenario.config)), qs(verdictLine(r, u))));
    label->setStyleSheet(QStringLiteral("color:%1;font-weight:bold").arg(appearance::fitText(r.verdict.fit).name()));
}

} // namespace

ComparePanel::ComparePanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_pin(new QPushButton(tr("Pin this configuration"), this))
    , m_unpin(new QPushButton(tr("Unpin"), this))
    , m_hint(new QLabel(this))
{
    m_pin->setObjectName(QStringLiteral("pin"));
    m_pin->setToolTip(tr("Keep this configuration to compare the next changes with (Ctrl+Shift+P)"));
    m_unpin->setObjectName(QStringLiteral("unpin"));
    m_hint->setObjectName(QStringLiteral("compareHint"));
    m_hint->setWordWrap(true);
    m_hint->setText(tr("<p><b>Nothing pinned yet.</b></p><p><b>Pin this configuration</b> (Ctrl+Shift+P), then "
                       "change the model, the batch, the optimizer or anything else: this tab shows both "
                       "verdicts, both breakdowns, the difference per category and every setting that "
                       "changed. Saved and exported sheets carry the comparison for review.</p>"));
    m_hint->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    auto *layout = new QVBoxLayout(this);
    auto *head = new QHBoxLayout;
    head->addWidget(m_pin);
    head->addWidget(m_unpin);
    head->addStretch(1);
    layout->addLayout(head);
    layout->addWidget(m_hint);
    layout->addStretch(1);

    connect(m_pin, &QPushButton::clicked, session, &Session::pin);
    connect(m_unpin, &QPushButton::clicked, session, &Session::unpin);
    const auto stale = [this] {
        m_dirty = true;
        if (isVisible())
            refresh();
    };
    connect(session, &Session::pinnedChanged, this, stale);
    connect(session, &Session::reportReady, this, stale);
    connect(session, &Session::unitsChanged, this, stale);
    refresh();
}

void ComparePanel::ensureBody()
{
    // Made when first needed (a pin, or a look at the chart): a chart view costs every window that
    // never compares (the widget tests make hundreds of windows).
    if (m_body)
        return;
    m_body = new QWidget(this);
    m_chart = new BreakdownChart(m_body);
    m_pinnedVerdict = new QLabel(m_body);
    m_currentVerdict = new QLabel(m_body);
    m_amounts = table(QStringLiteral("compareAmounts"), {tr("Category"), tr("Pinned"), tr("Current"), tr("Difference")}, m_body);
    m_changes = table(QStringLiteral("compareChanges"), {tr("Setting"), tr("Pinned"), tr("Current")}, m_body);
    for (QLabel *l : {m_pinnedVerdict, m_currentVerdict}) {
        l->setWordWrap(true);
        l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    }
    m_pinnedVerdict->setObjectName(QStringLiteral("pinnedVerdict"));
    m_currentVerdict->setObjectName(QStringLiteral("currentVerdict"));
    auto *bodyLayout = new QVBoxLayout(m_body);
    bodyLayout->setContentsMargins(0, 0, 0, 0);
    bodyLayout->addWidget(m_pinnedVerdict);
    bodyLayout->addWidget(m_currentVerdict);
    // the two bars beside the amounts; the changed settings (mostly a few rows) under both
    auto *rows = new QSplitter(Qt::Vertical, m_body);
    auto *split = new QSplitter(Qt::Horizontal, rows);
    split->addWidget(m_chart);
    split->addWidget(m_amounts);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 0); // the amounts whole (refresh sets their width), the chart the rest
    rows->addWidget(split);
    rows->addWidget(m_changes);
    rows->setStretchFactor(0, 3);
    rows->setStretchFactor(1, 1);
    bodyLayout->addWidget(rows, 1);
    auto *outer = static_cast<QVBoxLayout *>(layout());
    outer->insertWidget(outer->count() - 1, m_body, 1); // above the stretch
    m_chart->setModel(&m_model);
    m_body->setVisible(m_session->pinned().has_value());
}

BreakdownChart *ComparePanel::chart()
{
    ensureBody();
    return m_chart;
}

QTableWidget *ComparePanel::amounts()
{
    ensureBody();
    return m_amounts;
}

QTableWidget *ComparePanel::changes()
{
    ensureBody();
    return m_changes;
}

void ComparePanel::showEvent(QShowEvent *e)
{
    QWidget::showEvent(e);
    if (m_dirty)
        refresh();
}

QPixmap ComparePanel::picture(const QSize &size)
{
    ensureBody();
    if (m_dirty)
        refresh();
    return m_chart->toPixmap(size);
}

QString ComparePanel::verdicts() const
{
    return m_body ? m_pinnedVerdict->text() + QLatin1Char('\n') + m_currentVerdict->text() : QString();
}

void ComparePanel::refresh()
{
    m_dirty = false;
    const bool pinned = m_session->pinned().has_value();
    if (pinned)
        ensureBody();
    m_hint->setVisible(!pinned);
    if (m_body)
        m_body->setVisible(pinned);
    m_unpin->setEnabled(pinned);
    m_pin->setText(pinned ? tr("Pin this one instead") : tr("Pin this configuration"));
    const Unit u = m_session->units();
    const Report &pr = m_session->pinnedReport();
    const Report &cr = m_session->report();
    if (!pinned) {
        m_model.clear();
        if (m_body) {
            m_amounts->setRowCount(0);
            m_changes->setRowCount(0);
        }
        return;
    }
    showVerdict(m_pinnedVerdict, tr("Pinned"), pr, u);
    showVerdict(m_currentVerdict, tr("Current"), cr, u);
    m_model.setComparison(pr, cr, u);
    // The current card's line; each bar's own card is in its verdict.
    const int64_t cap = processCapacityBytes(cr.scenario.gpu);
    m_chart->setCapacity(cap, static_cast<int64_t>(static_cast<double>(cap) * (1.0 - cr.scenario.reserve)),
                         qs(cr.scenario.gpu.name));

    m_amounts->setRowCount(0);
    if (pr.error.empty() && cr.error.empty()) {
        const auto amounts = compareReports(pr, cr);
        m_amounts->setRowCount(static_cast<int>(amounts.size()));
        for (int i = 0; i < static_cast<int>(amounts.size()); ++i) {
            const ComparedAmount &a = amounts[static_cast<size_t>(i)];
            m_amounts->setItem(i, 0, cell(qs(a.name), false));
            m_amounts->setItem(i, 1, cell(qs(formatBytes(a.pinned, u, 2)), true));
            m_amounts->setItem(i, 2, cell(qs(formatBytes(a.current, u, 2)), true));
            auto *d = cell(qs(signedBytes(a.current - a.pinned, u)), true);
            // more memory red, less green; the headroom row the other way round
            const bool headroomRow = i == static_cast<int>(amounts.size()) - 1;
            const int64_t diff = headroomRow ? a.pinned - a.current : a.current - a.pinned;
            if (diff != 0)
                d->setForeground(appearance::fitText(diff > 0 ? Fit::OOM : Fit::Fits));
            m_amounts->setItem(i, 3, d);
        }
    }
    // every column of the amounts readable: the table as wide as its contents
    m_amounts->horizontalHeader()->setStretchLastSection(false);
    m_amounts->resizeColumnsToContents();
    m_amounts->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_amounts->setMinimumWidth(m_amounts->horizontalHeader()->length() + m_amounts->verticalScrollBar()->sizeHint().width() +
                               2 * m_amounts->frameWidth());
    const auto changes = diffScenarios(*m_session->pinned(), m_session->scenario());
    m_changes->setRowCount(std::max<int>(1, static_cast<int>(changes.size())));
    if (changes.empty()) {
        m_changes->setItem(0, 0, cell(tr("(nothing: the same configuration)"), false));
        m_changes->setItem(0, 1, cell(QString(), false));
        m_changes->setItem(0, 2, cell(QString(), false));
    }
    for (int i = 0; i < static_cast<int>(changes.size()); ++i) {
        const ScenarioChange &c = changes[static_cast<size_t>(i)];
        m_changes->setItem(i, 0, cell(qs(c.setting), false));
        m_changes->setItem(i, 1, cell(qs(c.pinned), false));
        m_changes->setItem(i, 2, cell(qs(c.current), false));
    }
}
