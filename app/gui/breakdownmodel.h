#pragma once

#include "headroom/sheet.h"

#include <QAbstractTableModel>

// Categories x bars: the one table the breakdown chart reads (docs/style.md point 5). Rows are the
// nine categories plus "measured, not attributed" (a measured phase peak has no category split).
// Columns are bars: estimated and measured for the whole step, or for each phase.
class BreakdownModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum class View { Step, Phases };
    enum Role { BytesRole = Qt::UserRole + 1, MeasuredRole, CategoryRole };
    static constexpr int kUnattributedRow = headroom::kCategoryCount;

    struct Bar
    {
        QString label;
        bool measured = false;
        std::array<int64_t, headroom::kCategoryCount + 1> bytes{};
        int64_t total() const;
    };

    explicit BreakdownModel(QObject *parent = nullptr);

    // `measured` may be null. The estimate is the report's.
    void setContent(const headroom::Report &report, const headroom::Measurement *measured, headroom::Unit units,
                    View view);

    // Two bars, "Pinned" and "Current", each at its own peak (issue 31's comparison). A report
    // that could not be estimated gives no bar.
    void setComparison(const headroom::Report &pinned, const headroom::Report &current, headroom::Unit units);
    void clear(); // no bars

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    const std::vector<Bar> &bars() const { return m_bars; }
    headroom::Unit units() const { return m_units; }
    View view() const { return m_view; }
    static QString rowLabel(int row);

private:
    std::vector<Bar> m_bars;
    headroom::Unit m_units = headroom::Unit::GiB;
    View m_view = View::Step;
};
