#pragma once

#include "measurementsmodel.h"
#include "session.h"

#include <QWidget>

class QTableView;

// Every probe run of the session; selecting one overlays it on the breakdown chart.
class MeasurementsPanel : public QWidget
{
    Q_OBJECT
public:
    explicit MeasurementsPanel(Session *session, QWidget *parent = nullptr);
    MeasurementsModel *model() { return &m_model; }

signals:
    void importRequested();

private:
    Session *m_session;
    MeasurementsModel m_model;
    QTableView *m_view;
};
