#pragma once

#include "headroom/sheet.h"

#include <QAbstractTableModel>

// The recommendations of the latest report, in docs/seeds.md order: dynamic, static, sharding.
class RecommendationModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    // What "1 · dynamic", "2 · static", "3 · sharding" and "more" mean (the Order column's tooltips).
    static QString orderExplained();
    enum Column { Change, Kind, Saves, Cost, FitsAfter, ColumnCount };
    explicit RecommendationModel(QObject *parent = nullptr);
    void setContent(const std::vector<headroom::Recommendation> &recs, headroom::Unit units);
    const headroom::Recommendation *at(int row) const;

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    std::vector<headroom::Recommendation> m_recs;
    headroom::Unit m_units = headroom::Unit::GiB;
};
