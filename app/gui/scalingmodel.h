#pragma once

#include "session.h"

#include <QAbstractTableModel>

// The scaling table of docs/seeds.md: config | what grows | peak allocated | peak reserved | passed?,
// plus what each step costs against the previous row of its group.
class ScalingModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column { Group, Config, Grows, PeakAllocated, PeakReserved, DeviceTotal, Costs, Verdict, ColumnCount };
    explicit ScalingModel(QObject *parent = nullptr);
    void setContent(const ScalingData &data, headroom::Unit units);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    // The table as Markdown, for the clipboard.
    QString toMarkdown() const;

private:
    std::vector<ScalingData::Row> m_rows;
    headroom::Unit m_units = headroom::Unit::GiB;
};
