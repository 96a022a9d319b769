#pragma once

#include "session.h"

#include <QAbstractTableModel>

// Every probe run of this session (or of an opened sheet): configuration, device, per-phase
// peaks and the error of the estimate for the same configuration.
class MeasurementsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column { Model, Config, Device, Ranks, AfterLoad, Forward, Backward, Optimizer, Peak, Estimated, Error, Result, ColumnCount };
    explicit MeasurementsModel(Session *session, QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    Session *m_session;
};
