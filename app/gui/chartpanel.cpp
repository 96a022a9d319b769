#include "chartpanel.h"

#include "charts.h"
#include "qtutil.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QVBoxLayout>

using namespace headroom;

ChartPanel::ChartPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_chart(new BreakdownChart(this))
    , m_view(new QComboBox(this))
    , m_units(new QComboBox(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto *bar = new QHBoxLayout;
    m_view->setObjectName(QStringLiteral("chartView"));
    m_view->addItem(tr("Whole step (at the peak)"), static_cast<int>(BreakdownModel::View::Step));
    m_view->addItem(tr("By phase"), static_cast<int>(BreakdownModel::View::Phases));
    m_units->setObjectName(QStringLiteral("units"));
    m_units->addItem(QStringLiteral("GiB"), static_cast<int>(Unit::GiB));
    m_units->addItem(QStringLiteral("GB"), static_cast<int>(Unit::GB));
    bar->addWidget(new QLabel(tr("Show"), this));
    bar->addWidget(m_view);
    bar->addStretch(1);
    bar->addWidget(new QLabel(tr("Units"), this));
    bar->addWidget(m_units);
    layout->addLayout(bar);
    layout->addWidget(m_chart, 1);
    m_chart->setModel(&m_model);

    connect(m_view, qOverload<int>(&QComboBox::currentIndexChanged), this, &ChartPanel::refresh);
    connect(m_units, qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this] { m_session->setUnits(static_cast<Unit>(m_units->currentData().toInt())); });
    connect(session, &Session::reportReady, this, &ChartPanel::refresh);
    connect(session, &Session::selectionChanged, this, &ChartPanel::refresh);
    connect(session, &Session::unitsChanged, this, [this] {
        const QSignalBlocker block(m_units);
        m_units->setCurrentIndex(m_units->findData(static_cast<int>(m_session->units())));
        refresh();
    });
    refresh();
}

void ChartPanel::setView(BreakdownModel::View v)
{
    m_view->setCurrentIndex(m_view->findData(static_cast<int>(v)));
}

void ChartPanel::refresh()
{
    const Report &r = m_session->report();
    m_model.setContent(r, m_session->selectedMeasurement(), m_session->units(),
                       static_cast<BreakdownModel::View>(m_view->currentData().toInt()));
    // The card's line from the scenario itself: a configuration that cannot be estimated has no
    // verdict, but the card is still the card.
    const int64_t cap = processCapacityBytes(r.scenario.gpu);
    const auto usable = static_cast<int64_t>(static_cast<double>(cap) * (1.0 - r.scenario.reserve));
    m_chart->setCapacity(cap, usable, qs(r.scenario.gpu.name));
}
