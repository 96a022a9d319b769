#pragma once

#include "breakdownmodel.h"
#include "session.h"

#include <QWidget>

class BreakdownChart;
class QComboBox;

// The breakdown chart with its switches: whole step or per phase, GiB or GB.
class ChartPanel : public QWidget
{
    Q_OBJECT
public:
    explicit ChartPanel(Session *session, QWidget *parent = nullptr);
    BreakdownChart *chart() { return m_chart; }
    BreakdownModel *model() { return &m_model; }
    void setView(BreakdownModel::View v);

private:
    void refresh();
    Session *m_session;
    BreakdownModel m_model;
    BreakdownChart *m_chart;
    QComboBox *m_view;
    QComboBox *m_units;
};
