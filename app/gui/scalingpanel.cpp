#include "scalingpanel.h"

#include "charts.h"

#include <QApplication>
#include <QClipboard>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

ScalingPanel::ScalingPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_seqChart(new ScalingChart(tr("Peak against sequence length"), tr("sequence length (tokens)"), this))
    , m_batchChart(new ScalingChart(tr("Peak against micro-batch"), tr("micro-batch"), this))
{
    auto *layout = new QVBoxLayout(this);
    auto *splitter = new QSplitter(Qt::Vertical, this);
    auto *charts = new QWidget(splitter);
    auto *chartRow = new QHBoxLayout(charts);
    chartRow->setContentsMargins(0, 0, 0, 0);
    chartRow->addWidget(m_seqChart);
    chartRow->addWidget(m_batchChart);
    splitter->addWidget(charts);

    auto *tableBox = new QWidget(splitter);
    auto *tableLayout = new QVBoxLayout(tableBox);
    tableLayout->setContentsMargins(0, 0, 0, 0);
    auto *head = new QHBoxLayout;
    auto *intro = new QLabel(tr("<b>Scaling table</b> — what each step costs against the row above"), tableBox);
    intro->setWordWrap(true);
    head->addWidget(intro, 1);
    auto *copy = new QPushButton(tr("Copy as Markdown"), tableBox);
    copy->setObjectName(QStringLiteral("copyScaling"));
    head->addWidget(copy);
    tableLayout->addLayout(head);
    auto *view = new QTableView(tableBox);
    view->setObjectName(QStringLiteral("scalingTable"));
    view->setModel(&m_model);
    view->verticalHeader()->hide();
    view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view->horizontalHeader()->setStretchLastSection(true);
    view->setAlternatingRowColors(true);
    tableLayout->addWidget(view);
    splitter->addWidget(tableBox);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    layout->addWidget(splitter);

    connect(copy, &QPushButton::clicked, this, &ScalingPanel::copyTable);
    connect(session, &Session::reportReady, this, &ScalingPanel::refresh);
    connect(session, &Session::unitsChanged, this, &ScalingPanel::refresh);
    refresh();
}

void ScalingPanel::showEvent(QShowEvent *e)
{
    QWidget::showEvent(e);
    if (m_dirty)
        refresh();
}

void ScalingPanel::refresh()
{
    if (!isVisible()) {
        m_dirty = true;
        return;
    }
    m_dirty = false;
    const ScalingData &d = m_session->scaling();
    const auto &s = m_session->report().scenario;
    m_model.setContent(d, m_session->units());
    m_seqChart->setContent(d.bySeq, s.config.seqLen, processCapacityBytes(s.gpu), m_session->units());
    m_batchChart->setContent(d.byBatch, s.config.microBatch, processCapacityBytes(s.gpu), m_session->units());
}

void ScalingPanel::copyTable()
{
    if (m_dirty) // the table is copied from the latest report even if the tab was never shown
        m_model.setContent(m_session->scaling(), m_session->units());
    QApplication::clipboard()->setText(m_model.toMarkdown());
}
