#include "measurementspanel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QShortcut>
#include <QTableView>
#include <QVBoxLayout>

MeasurementsPanel::MeasurementsPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_model(session)
    , m_view(new QTableView(this))
{
    auto *layout = new QVBoxLayout(this);
    auto *head = new QHBoxLayout;
    auto *intro = new QLabel(tr("<b>Probe runs</b> — select one to overlay it on the breakdown. "
                                "Error is measured against the estimate of the same configuration."),
                             this);
    intro->setWordWrap(true); // a narrow window wraps it instead of widening the tabs
    head->addWidget(intro, 1);
    auto *useButton = new QPushButton(tr("Use its configuration"), this);
    useButton->setObjectName(QStringLiteral("useMeasurementConfig"));
    useButton->setToolTip(tr("Load the selected run's model and configuration into the explorer (undoable)"));
    auto *removeButton = new QPushButton(tr("Remove"), this);
    removeButton->setObjectName(QStringLiteral("removeMeasurement"));
    removeButton->setToolTip(tr("Remove the selected run from this session (Delete)"));
    auto *importButton = new QPushButton(tr("Import measurement…"), this);
    importButton->setObjectName(QStringLiteral("importMeasurement"));
    head->addWidget(useButton);
    head->addWidget(removeButton);
    head->addWidget(importButton);
    layout->addLayout(head);
    m_view->setObjectName(QStringLiteral("measurements"));
    m_view->setModel(&m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // The configuration can be long: a bounded, resizable column (elided, the whole in its tooltip).
    m_view->horizontalHeader()->setSectionResizeMode(MeasurementsModel::Config, QHeaderView::Interactive);
    m_view->horizontalHeader()->resizeSection(MeasurementsModel::Config, 260);
    m_view->setTextElideMode(Qt::ElideRight);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->setAlternatingRowColors(true);
    layout->addWidget(m_view);
    // An empty tab says how to fill it (issue 31)
    auto *hint = new QLabel(tr("<p><b>No measurements yet.</b></p>"
                               "<p><b>Measure now</b> (Ctrl+M, under the chart) runs one real training step of this "
                               "configuration on this machine and lists it here, overlaid on the estimate.</p>"
                               "<p>Or import a probe result from another machine: "
                               "<tt>headroom-probe --request request.json --out result.json</tt> there, then "
                               "<i>Import measurement…</i> here, or drop the file on the window.</p>"),
                            this);
    hint->setObjectName(QStringLiteral("measurementsHint"));
    hint->setWordWrap(true);
    hint->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    hint->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(hint, 1);
    const auto showHint = [this, hint] {
        const bool none = m_session->measurements().empty();
        hint->setVisible(none);
        m_view->setVisible(!none);
    };
    connect(session, &Session::measurementsChanged, this, showHint);
    showHint();

    connect(importButton, &QPushButton::clicked, this, &MeasurementsPanel::importRequested);
    connect(useButton, &QPushButton::clicked, this, [this] { m_session->useMeasurementConfiguration(m_session->selectedIndex()); });
    connect(removeButton, &QPushButton::clicked, this, [this] { m_session->removeMeasurement(m_session->selectedIndex()); });
    auto *del = new QShortcut(QKeySequence::Delete, m_view);
    del->setContext(Qt::WidgetShortcut);
    connect(del, &QShortcut::activated, this, [this] { m_session->removeMeasurement(m_session->selectedIndex()); });
    const auto enable = [this, useButton, removeButton] {
        const bool any = m_session->selectedIndex() >= 0;
        useButton->setEnabled(any);
        removeButton->setEnabled(any);
    };
    connect(session, &Session::selectionChanged, this, enable);
    connect(session, &Session::measurementsChanged, this, enable);
    enable();
    connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        const auto rows = m_view->selectionModel()->selectedRows();
        m_session->selectMeasurement(rows.isEmpty() ? -1 : rows.first().row());
    });
    const auto follow = [this] {
        const int sel = m_session->selectedIndex();
        const QSignalBlocker block(m_view->selectionModel());
        m_view->clearSelection();
        if (sel >= 0)
            m_view->selectRow(sel);
        m_view->viewport()->update();
    };
    connect(session, &Session::selectionChanged, this, follow);
    connect(session, &Session::measurementsChanged, this, follow);
}
