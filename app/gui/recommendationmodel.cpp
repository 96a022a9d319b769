#include "recommendationmodel.h"

#include "appearance.h"

#include "qtutil.h"

#include <cstdlib>
#include <QColor>

using namespace headroom;

RecommendationModel::RecommendationModel(QObject *parent)
    : QAbstractTableModel(parent)
{
}

void RecommendationModel::setContent(const std::vector<Recommendation> &recs, Unit units)
{
    beginResetModel();
    m_recs = recs;
    m_units = units;
    endResetModel();
}

const Recommendation *RecommendationModel::at(int row) const
{
    return row >= 0 && row < rowCount() ? &m_recs[static_cast<size_t>(row)] : nullptr;
}

int RecommendationModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_recs.size());
}

int RecommendationModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RecommendationModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Recommendation &r = m_recs[static_cast<size_t>(index.row())];
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Change: return qs(r.title);
        case Kind:
            return r.group == RecommendationGroup::Dynamic    ? tr("1 · dynamic")
                   : r.group == RecommendationGroup::Static   ? tr("2 · static")
                   : r.group == RecommendationGroup::Sharding ? tr("3 · sharding")
                                                              : tr("more");
        case Saves: // the column says "Saves": no sign; a row that grows the run says how much more it
            // needs ("uses 81.1 GiB" on a 78.6 GiB card read as its total: issue 31 row 9)
            return r.savingBytes >= 0 ? qs(formatBytes(r.savingBytes, m_units, 1))
                                      : tr("+%1 more").arg(qs(formatBytes(-r.savingBytes, m_units, 1)));
        case Cost: return qs(r.cost);
        case FitsAfter: return r.fitsAfter ? tr("fits") : tr("not yet");
        }
    } else if (role == Qt::ToolTipRole && index.column() == Kind) {
        return orderExplained();
    } else if (role == Qt::ToolTipRole) {
        return tr("%1\n%2 %3 per GPU; cost: %4.\nDouble-click or press Apply to use it; Undo restores.")
            .arg(qs(r.title), r.savingBytes >= 0 ? tr("Saves") : tr("Needs"),
                 qs(formatBytes(std::abs(r.savingBytes), m_units, 2)) + (r.savingBytes >= 0 ? QString() : tr(" more")),
                 qs(r.cost));
    } else if (role == Qt::ForegroundRole && index.column() == FitsAfter) {
        return r.fitsAfter ? appearance::fitText(Fit::Fits) : appearance::mutedText();
    } else if (role == Qt::UserRole && index.column() == Saves) {
        return static_cast<qlonglong>(r.savingBytes);
    }
    return {};
}

QString RecommendationModel::orderExplained()
{
    return tr("The order to try changes in:\n"
              "1 · dynamic: what grows with the batch and the sequence (activations, logits): micro-batch with "
              "accumulation, checkpointing, the fused loss, shorter sequences. Cheapest to change.\n"
              "2 · static: what the model itself holds (weights, gradients, optimizer state): 8-bit or paged "
              "optimizers, LoRA/QLoRA, optimizer offload.\n"
              "3 · sharding: spread the static part over GPUs (ZeRO/FSDP): more cards and communication.\n"
              "more: the run fits; what it could grow to.");
}

QVariant RecommendationModel::headerData(int section, Qt::Orientation o, int role) const
{
    if (role == Qt::ToolTipRole && o == Qt::Horizontal && section == Kind)
        return orderExplained();
    if (role != Qt::DisplayRole || o != Qt::Horizontal)
        return {};
    switch (section) {
    case Change: return tr("Change");
    case Kind: return tr("Order");
    case Saves: return tr("Saves");
    case Cost: return tr("Cost");
    case FitsAfter: return tr("After");
    }
    return {};
}
