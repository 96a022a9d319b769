#include "breakdownmodel.h"

#include "qtutil.h"

#include <QLocale>

using namespace headroom;

int64_t BreakdownModel::Bar::total() const
{
    int64_t t = 0;
    for (int64_t b : bytes)
        t += b;
    return t;
}

BreakdownModel::BreakdownModel(QObject *parent)
    : QAbstractTableModel(parent)
{
}

namespace {

BreakdownModel::Bar barOf(const QString &label, bool measured, const Breakdown &b)
{
    BreakdownModel::Bar bar{label, measured, {}};
    for (int i = 0; i < kCategoryCount; ++i)
        bar.bytes[static_cast<size_t>(i)] = b.bytes[static_cast<size_t>(i)];
    return bar;
}

} // namespace

void BreakdownModel::setContent(const Report &report, const Measurement *measured, Unit units, View view)
{
    beginResetModel();
    m_units = units;
    m_view = view;
    m_bars.clear();
    if (report.error.empty()) {
        const Estimate &e = report.estimate;
        if (view == View::Step) {
            m_bars.push_back(barOf(tr("Estimated"), false, e.peak));
            if (measured && measured->attributed()) {
                m_bars.push_back(barOf(tr("Measured"), true, measuredBreakdown(*measured)));
            } else if (measured) { // one block of the peak allocation, as the phases view shows it
                Bar bar{tr("Measured"), true, {}};
                const Breakdown mb = measuredBreakdown(*measured);
                bar.bytes[kUnattributedRow] = measured->peakAllocatedBytes;
                for (Category c : {Category::AllocatorSlack, Category::CudaContext})
                    bar.bytes[static_cast<size_t>(c)] = mb[c];
                m_bars.push_back(bar);
            }
            // Note [Vision share]: what of the estimate the vision tower and its projector hold,
            // a bar of its own in the same categories, where the model has a tower that ran
            if (e.peakVision.total() > 0)
                m_bars.push_back(barOf(tr("Of it: vision tower"), false, e.peakVision));
        } else {
            static const char *const shortNames[] = {"Load", "Fwd", "Bwd", "Opt", "Gen", "Ref"}; // by Phase
            for (Phase p : kStepOrder) {
                const auto mp = measured ? measured->steady(p) : std::nullopt;
                // GRPO's generation and reference: only where the step has them
                const bool rollout = p == Phase::Generation || p == Phase::Reference;
                if (rollout && e.phase(p).peakAllocatedBytes == 0 && !mp)
                    continue;
                const bool pair = mp.has_value();
                // the phase's name without " peak" ("After load", not "After": issue 31 row 6); short
                // beside a measured twin
                QString whole = qs(label(p));
                if (whole.endsWith(QLatin1String(" peak")))
                    whole.chop(5);
                // short beside a measured twin, and where a rollout makes six bars
                const QString name = pair || !e.rollout.empty() ? QLatin1String(shortNames[static_cast<int>(p)]) : whole;
                Breakdown b = e.phase(p).atPeak;
                // As for the measured bar: what the allocator holds in the phase beyond the tensors
                // (the replayed reserved pool; the ledger path has none per phase).
                if (e.phase(p).peakReservedBytes > 0)
                    b[Category::AllocatorSlack] = std::max<int64_t>(0, e.phase(p).peakReservedBytes - b.allocated());
                b[Category::CudaContext] = e.peak[Category::CudaContext];
                m_bars.push_back(barOf(name, false, b)); // its measured twin follows it
                if (mp) {
                    // "meas." under each measured twin; the category axis needs unique names, so
                    // each carries as many zero-width spaces as its phase's index.
                    // Stacked by category where the engine attributed the phase's peak (its
                    // phase_attribution), else one block of the phase's peak allocation.
                    const QString label = tr("meas.") + QString(static_cast<int>(p), QChar(0x200B));
                    const int64_t reserved = mp.value().peakReservedBytes, allocated = mp.value().peakAllocatedBytes;
                    auto by = measured->phaseAttribution[static_cast<size_t>(p)];
                    // After load the device holds the model, and DDP's buckets where there are
                    // ranks: the measured weights and communication of the peak's attribution
                    // (by tensor identity; they do not change after load), the rest temporaries.
                    const Breakdown &whole = measured->attribution;
                    if (!by && p == Phase::AfterLoad && whole[Category::Weights] > 0 &&
                        whole[Category::Weights] + whole[Category::Communication] <= allocated) {
                        Breakdown load;
                        load[Category::Weights] = whole[Category::Weights];
                        load[Category::Communication] = whole[Category::Communication];
                        load[Category::Temporaries] = allocated - load.allocated();
                        by = load;
                    }
                    Bar bar = by ? barOf(label, true, *by) : Bar{label, true, {}};
                    if (!by)
                        bar.bytes[kUnattributedRow] = allocated;
                    bar.bytes[static_cast<size_t>(Category::AllocatorSlack)] =
                        std::max<int64_t>(0, reserved - (by ? by->allocated() : allocated));
                    bar.bytes[static_cast<size_t>(Category::CudaContext)] = measured->cudaContextBytes;
                    m_bars.push_back(bar);
                }
            }
        }
    }
    endResetModel();
}

void BreakdownModel::setComparison(const Report &pinned, const Report &current, Unit units)
{
    beginResetModel();
    m_units = units;
    m_view = View::Step;
    m_bars.clear();
    if (pinned.error.empty())
        m_bars.push_back(barOf(tr("Pinned"), false, pinned.estimate.peak));
    if (current.error.empty())
        m_bars.push_back(barOf(tr("Current"), false, current.estimate.peak));
    endResetModel();
}

void BreakdownModel::clear()
{
    beginResetModel();
    m_bars.clear();
    endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : kCategoryCount + 1;
}

int BreakdownModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_bars.size());
}

QString BreakdownModel::rowLabel(int row)
{
    if (row == kUnattributedRow)
        return tr("Measured (not split by category)");
    return qs(label(kAllCategories[static_cast<size_t>(row)]));
}

QVariant BreakdownModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Bar &bar = m_bars[static_cast<size_t>(index.column())];
    const int64_t bytes = bar.bytes[static_cast<size_t>(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        return qs(formatBytes(bytes, m_units, 2));
    case Qt::ToolTipRole: {
        const QString meaning = index.row() == kUnattributedRow
                                    ? tr("The probe measured this phase's peak allocation as a whole.")
                                    : qs(describe(kAllCategories[static_cast<size_t>(index.row())]));
        return tr("%1, %2: %3 (%4 bytes)\n%5")
            .arg(rowLabel(index.row()), QString(bar.label).replace(QLatin1Char('\n'), QLatin1Char(' ')),
                 qs(formatBytes(bytes, m_units, 3)), QLocale().toString(static_cast<qlonglong>(bytes)), meaning);
    }
    case Qt::TextAlignmentRole:
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    case BytesRole:
        return static_cast<qlonglong>(bytes);
    case MeasuredRole:
        return bar.measured;
    case CategoryRole:
        return index.row();
    default:
        return {};
    }
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation o, int role) const
{
    if (role != Qt::DisplayRole)
        return {};
    if (o == Qt::Vertical)
        return section >= 0 && section <= kUnattributedRow ? rowLabel(section) : QVariant();
    return section >= 0 && section < columnCount() ? m_bars[static_cast<size_t>(section)].label : QVariant();
}
