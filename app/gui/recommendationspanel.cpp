#include "recommendationspanel.h"

#include "qtutil.h"

#include <QAction>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QShortcut>
#include <QVBoxLayout>

RecommendationsPanel::RecommendationsPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_view(new QTableView(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto *head = new QHBoxLayout;
    auto *title = new QLabel(tr("<b>What to change</b> — dynamic peak first, then the static base, then sharding"), this);
    auto *applyButton = new QPushButton(tr("Apply"), this);
    applyButton->setObjectName(QStringLiteral("applyRecommendation"));
    auto *undoButton = new QPushButton(tr("Undo"), this);
    undoButton->setObjectName(QStringLiteral("undo"));
    undoButton->setEnabled(false);
    head->addWidget(title, 1);
    head->addWidget(applyButton);
    head->addWidget(undoButton);
    layout->addLayout(head);

    m_view->setObjectName(QStringLiteral("recommendations"));
    m_view->setModel(&m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setSectionResizeMode(RecommendationModel::Change, QHeaderView::ResizeToContents);
    m_view->horizontalHeader()->setSectionResizeMode(RecommendationModel::Cost, QHeaderView::Stretch);
    m_view->setWordWrap(false);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->setAlternatingRowColors(true);
    layout->addWidget(m_view);

    connect(m_view, &QTableView::doubleClicked, this, [this](const QModelIndex &i) { apply(i.row()); });
    // Apply applies the selected row, and only that (issue 31: with none selected it applied row 1)
    const auto applySelected = [this] {
        if (const auto rows = m_view->selectionModel()->selectedRows(); !rows.isEmpty())
            apply(rows.first().row());
    };
    connect(applyButton, &QPushButton::clicked, this, applySelected);
    // Enter on a selected row applies it
    for (Qt::Key key : {Qt::Key_Return, Qt::Key_Enter})
        connect(new QShortcut(QKeySequence(key), m_view, nullptr, nullptr, Qt::WidgetShortcut), &QShortcut::activated,
                this, applySelected);
    // Apply is there for a selected row of current advice
    const auto enableApply = [this, applyButton] {
        applyButton->setEnabled(!m_session->adviceIsStale() && m_view->selectionModel()->hasSelection());
    };
    connect(undoButton, &QPushButton::clicked, session->undoStack(), &QUndoStack::undo);
    connect(session->undoStack(), &QUndoStack::canUndoChanged, undoButton, &QPushButton::setEnabled);
    const auto refresh = [this, title, enableApply] {
        m_model.setContent(m_session->report().recommendations, m_session->units());
        m_view->scrollToTop(); // new advice starts at its first row, not where the old list was scrolled
        // Until the advice for the new scenario lands, the shown rows are the previous one's:
        // greyed out, and not applicable (applying would bring the old configuration back).
        const bool stale = m_session->adviceIsStale();
        m_view->setEnabled(!stale);
        enableApply();
        const bool traced = !m_session->scenario().model.estimable;
        title->setText(stale    ? tr("<b>What to change</b> — updating…")
                       : traced ? tr("<b>What to change</b> — none yet for a traced model (change a control: it is traced)")
                                : tr("<b>What to change</b> — dynamic peak first, then the static base, then sharding"));
    };
    connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, applyButton, enableApply);
    connect(&m_model, &QAbstractItemModel::modelReset, applyButton, enableApply);
    connect(session, &Session::reportReady, this, refresh);
    connect(session, &Session::unitsChanged, this, refresh);
    refresh();
}

void RecommendationsPanel::apply(int row)
{
    if (m_session->adviceIsStale())
        return;
    const headroom::Recommendation *r = m_model.at(row);
    if (!r)
        return;
    headroom::Scenario s = m_session->scenario();
    s.config = r->config;
    m_session->applyScenario(s, qs(r->title));
}
