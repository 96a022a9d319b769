#include "measurementsmodel.h"

#include "appearance.h"

#include "qtutil.h"

#include <cmath>

#include <QColor>
#include <QTextDocument>

using namespace headroom;

MeasurementsModel::MeasurementsModel(Session *session, QObject *parent)
    : QAbstractTableModel(parent)
    , m_session(session)
{
    connect(session, &Session::measurementsChanged, this, [this] {
        beginResetModel();
        endResetModel();
    });
    connect(session, &Session::unitsChanged, this, [this] {
        if (rowCount() > 0)
            emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
    });
}

int MeasurementsModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_session->measurements().size());
}

int MeasurementsModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant MeasurementsModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const size_t row = static_cast<size_t>(index.row());
    const Measurement &m = m_session->measurements()[row];
    const auto &est = m_session->measurementEstimates()[row];
    const Unit u = m_session->units();
    const auto phaseCell = [&](Phase p) -> QVariant {
        const auto s = m.steady(p);
        return s ? qs(formatBytes(s->peakAllocatedBytes, u, 2)) : QStringLiteral("—");
    };
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Model: return qs(m.model.name.empty() ? m.model.id : m.model.name);
        case Config: return qs(summarize(m.config));
        case Device: return qs((m.deviceName.empty() ? m.device : m.deviceName) + " · " + m.engine);
        case Ranks:
            if (m.ranks.empty())
                return QStringLiteral("—");
            return tr("%1 × %2, spread %3×")
                .arg(m.ranks.size())
                .arg(qs(m.backend))
                .arg(rankSpread(m), 0, 'f', 3);
        case AfterLoad: return phaseCell(Phase::AfterLoad);
        case Forward: return phaseCell(Phase::Forward);
        case Backward: return phaseCell(Phase::Backward);
        case Optimizer: return phaseCell(Phase::Optimizer);
        case Peak: return qs(formatBytes(m.peakAllocatedBytes, u, 2));
        case Estimated: return est ? qs(formatBytes(est->peakAllocatedBytes, u, 2)) : QStringLiteral("—");
        case Error: {
            if (!est)
                return QStringLiteral("—");
            // Below the shown precision it is 0.0%, not "-0.0%".
            const double pct = estimateError(m, *est) * 100.0;
            return std::abs(pct) < 0.05 ? QStringLiteral("0.0%") : QString::asprintf("%+.1f%%", pct);
        }
        case Result:
            return m.oom ? tr("OOM in %1 at %2").arg(qs(toString(m.oom->phase)), qs(formatBytes(m.oom->inUseBytes, u, 1)))
                         : tr("ok");
        }
    } else if (role == Qt::ToolTipRole && index.column() == Ranks && !m.ranks.empty()) {
        QStringList lines{tr("Each rank's steady peak (the row shows the highest):")};
        for (const auto &r : m.ranks)
            lines << tr("rank %1: %2 in %3%4")
                         .arg(r.rank)
                         .arg(qs(formatBytes(r.peakAllocatedBytes, u, 2)), qs(toString(r.peakPhase)),
                              r.oom ? tr(", out of memory") : QString());
        if (rankSpread(m) > kUnevenSpread)
            lines << tr("Uneven: the ranks differ by more than %1%.").arg((kUnevenSpread - 1) * 100, 0, 'f', 0);
        return lines.join(QLatin1Char('\n'));
    } else if (role == Qt::ToolTipRole && index.column() == Config) {
        return Qt::convertFromPlainText(qs(summarize(m.config))); // narrower than the longest; a file's words, never rich text
    } else if (role == Qt::ToolTipRole) {
        return Qt::convertFromPlainText(tr("%1 on %2, %3\n%4\nHeadroom %5, %6")
                                            .arg(qs(m.model.name), qs(m.deviceName), qs(m.driver), qs(engineProvenance(m)),
                                                 qs(m.headroomVersion), qs(m.createdAt)));
    } else if (role == Qt::ForegroundRole) {
        if (index.column() == Result && m.oom)
            return appearance::fitText(Fit::OOM);
        if (index.column() == Error && est && std::abs(estimateError(m, *est)) > 0.05)
            return appearance::fitText(Fit::Tight);
        if (index.column() == Ranks && rankSpread(m) > kUnevenSpread)
            return appearance::fitText(Fit::Tight);
    } else if (role == Qt::TextAlignmentRole && index.column() != Model && index.column() != Config &&
               index.column() != Device && index.column() != Result) {
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    } else if (role == Qt::UserRole && index.column() == Peak) {
        return static_cast<qlonglong>(m.peakAllocatedBytes);
    }
    return {};
}

QVariant MeasurementsModel::headerData(int section, Qt::Orientation o, int role) const
{
    if (role != Qt::DisplayRole)
        return {};
    if (o == Qt::Vertical)
        return section + 1;
    switch (section) {
    case Model: return tr("Model");
    case Config: return tr("Configuration");
    case Device: return tr("Device");
    case Ranks: return tr("Ranks");
    case AfterLoad: return tr("After load");
    case Forward: return tr("Forward");
    case Backward: return tr("Backward");
    case Optimizer: return tr("Optimizer");
    case Peak: return tr("Peak allocated");
    case Estimated: return tr("Estimated");
    case Error: return tr("Error");
    case Result: return tr("Result");
    }
    return {};
}
