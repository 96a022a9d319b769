#include "scalingmodel.h"

#include "appearance.h"

#include "qtutil.h"

#include <QColor>

using namespace headroom;

ScalingModel::ScalingModel(QObject *parent)
    : QAbstractTableModel(parent)
{
}

void ScalingModel::setContent(const ScalingData &data, Unit units)
{
    beginResetModel();
    m_rows = data.table;
    m_units = units;
    endResetModel();
}

int ScalingModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ScalingModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ScalingModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const ScalingData::Row &r = m_rows[static_cast<size_t>(index.row())];
    const Estimate &e = r.row.estimate;
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Group: return r.group;
        case Config:
            return tr("batch %1 x %2%3")
                .arg(r.row.config.microBatch)
                .arg(r.row.config.seqLen)
                .arg(r.row.config.gradCheckpointing ? tr(", checkpointing") : QString());
        case Grows: return r.row.grows.empty() ? tr("(base)") : qs(r.row.grows);
        case PeakAllocated: return qs(formatBytes(e.peakAllocatedBytes, m_units, 1));
        case PeakReserved: return qs(formatBytes(e.peakReservedBytes, m_units, 1));
        case DeviceTotal: return qs(formatBytes(e.deviceTotalBytes, m_units, 1));
        case Costs:
            if (r.deltaBytes == 0)
                return QStringLiteral("—");
            return QString((r.deltaBytes > 0 ? QStringLiteral("+") : QStringLiteral("−")) +
                           qs(formatBytes(std::abs(r.deltaBytes), m_units, 1)));
        case Verdict: return qs(toString(r.row.verdict.fit));
        }
        return {};
    } else if (role == Qt::ForegroundRole && index.column() == Verdict) {
        return appearance::fitText(r.row.verdict.fit);
    } else if (role == Qt::TextAlignmentRole && index.column() >= PeakAllocated && index.column() <= Costs) {
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    } else if (role == Qt::UserRole && index.column() == DeviceTotal) {
        return static_cast<qlonglong>(e.deviceTotalBytes);
    }
    return {};
}

QVariant ScalingModel::headerData(int section, Qt::Orientation o, int role) const
{
    if (role != Qt::DisplayRole || o != Qt::Horizontal)
        return {};
    switch (section) {
    case Group: return tr("Group");
    case Config: return tr("Configuration");
    case Grows: return tr("What grows");
    case PeakAllocated: return tr("Peak allocated");
    case PeakReserved: return tr("Peak reserved");
    case DeviceTotal: return tr("Device total");
    case Costs: return tr("Costs");
    case Verdict: return tr("Fits the card?");
    }
    return {};
}

QString ScalingModel::toMarkdown() const
{
    QString out = QStringLiteral("|");
    for (int c = 0; c < ColumnCount; ++c)
        out += QLatin1Char(' ') + headerData(c, Qt::Horizontal).toString() + QStringLiteral(" |");
    out += QStringLiteral("\n|");
    for (int c = 0; c < ColumnCount; ++c)
        out += c < PeakAllocated || c == Verdict ? QStringLiteral("---|") : QStringLiteral("---:|");
    out += QLatin1Char('\n');
    for (int r = 0; r < rowCount(); ++r) {
        out += QLatin1Char('|');
        for (int c = 0; c < ColumnCount; ++c)
            out += QLatin1Char(' ') + data(index(r, c)).toString() + QStringLiteral(" |");
        out += QLatin1Char('\n');
    }
    return out;
}
