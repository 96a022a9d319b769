#pragma once

#include "session.h"

#include <QAbstractTableModel>

// Every probe run of this session (or of an opened sheet): configuration, device, per-phase
// peaks and the error of the estimate for the same configuration.
class MeasurementsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    // What a user compares first (peak, estimate, error) comes before the per-phase detail, so that
    // the error is on screen without scrolling at 1,400 px (issue 13).
    enum Column { Model, Config, Peak, Estimated, Error, Result, Device, Ranks, AfterLoad, Forward, Backward, Optimizer, ColumnCount };
    explicit MeasurementsModel(Session *session, QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    Session *m_session;
};
