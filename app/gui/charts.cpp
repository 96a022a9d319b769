#include "charts.h"
#include <QGraphicsScene>
#include <QGraphicsLayout>
#include <QPainter>
#include <QApplication>
#include <QEvent>

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QLocale>

#include "headroom/sheet.h"
#include <QCategoryAxis>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QBarLegendMarker>
#include <QLegendMarker>
#include <QLineSeries>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QToolTip>
#include <QValueAxis>
#include <QVBoxLayout>

#include <cmath>

using namespace headroom;

QColor categoryColor(int row)
{
    static const QColor colors[] = {
        QColor(0x4e, 0x79, 0xa7), // weights
        QColor(0xf2, 0x8e, 0x2b), // gradients
        QColor(0xe1, 0x57, 0x59), // optimizer state
        QColor(0x76, 0xb7, 0xb2), // activations
        QColor(0x59, 0xa1, 0x4f), // logits
        QColor(0xed, 0xc9, 0x48), // temporaries
        QColor(0xb0, 0x7a, 0xa1), // communication
        QColor(0xba, 0xb0, 0xac), // allocator slack
        QColor(0x9c, 0x75, 0x5f), // cuda context
        QColor(0xff, 0x9d, 0xa7), // reference model
        QColor(0x5a, 0x5a, 0x5a), // measured, not split
    };
    return row >= 0 && row < static_cast<int>(std::size(colors)) ? colors[row] : QColor(Qt::gray);
}

namespace {

// A chart's own colours from a palette: its background, titles, legend, axes and grid, and the
// lines marked "followsText" (a measured run's). The category colours stay: they read on both.
void paintChart(QChart *chart, const QPalette &p)
{
    // Each setter re-lays out what it touches: only what differs is set (a slider's repaint
    // calls this every time, and the colours rarely change).
    const QColor text = p.color(QPalette::WindowText), base = p.color(QPalette::Base);
    QColor grid = text;
    grid.setAlpha(45);
    if (chart->backgroundBrush().color() != base)
        chart->setBackgroundBrush(base);
    if (chart->titleBrush().color() != text)
        chart->setTitleBrush(text);
    if (chart->legend()->labelColor() != text)
        chart->legend()->setLabelColor(text);
    for (QAbstractAxis *a : chart->axes()) {
        if (a->labelsColor() != text)
            a->setLabelsColor(text);
        if (a->titleBrush().color() != text)
            a->setTitleBrush(text);
        if (a->gridLineColor() != grid)
            a->setGridLineColor(grid);
        if (a->linePenColor() != grid)
            a->setLinePenColor(grid);
    }
    for (QAbstractSeries *s : chart->series())
        if (auto *line = qobject_cast<QLineSeries *>(s);
            line && line->property("followsText").toBool() && line->pen().color() != text) {
            QPen pen = line->pen();
            pen.setColor(text);
            line->setPen(pen);
        }
}

// What a chart written to a file is drawn in, whatever the screen's palette: a sheet is a page.
QPalette filePalette()
{
    QPalette p;
    p.setColor(QPalette::Base, Qt::white);
    p.setColor(QPalette::WindowText, QColor(0x20, 0x20, 0x20));
    return p;
}

// The labels a category axis along x shows (the Scaling tab's sizes, the Layers tab's layers).
QStringList categoryLabels(const QChart *chart)
{
    for (QAbstractAxis *axis : chart->axes(Qt::Horizontal))
        if (auto *c = qobject_cast<QCategoryAxis *>(axis))
            return c->categoriesLabels();
    return {};
}

// Repaints its chart in the application's palette when that changes (issue 31: dark follows the desktop).
class PaletteFollower : public QObject
{
public:
    PaletteFollower(QChart *chart, QObject *parent)
        : QObject(parent)
        , m_chart(chart)
    {}
    bool eventFilter(QObject *, QEvent *e) override
    {
        if (e->type() == QEvent::ApplicationPaletteChange || e->type() == QEvent::PaletteChange)
            paintChart(m_chart, QApplication::palette());
        return false;
    }

private:
    QChart *m_chart;
};

QChartView *makeView(QChart *chart, QWidget *parent)
{
    parent->installEventFilter(new PaletteFollower(chart, parent));
    paintChart(chart, QApplication::palette());
    chart->setAnimationOptions(QChart::NoAnimation); // repaint within a frame of a slider move
    chart->setMargins(QMargins(4, 4, 4, 4));
    chart->legend()->setAlignment(Qt::AlignRight);
    auto *view = new QChartView(chart, parent);
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumSize(360, 260);
    auto *layout = new QVBoxLayout(parent);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(view);
    return view;
}

double niceCeiling(double v)
{
    if (v <= 0)
        return 1;
    const double p = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
        if (m * p >= v)
            return m * p;
    return 10 * p;
}

// The top of a y axis from 0 that holds `v`, and its tick count: the smallest step of 1, 2, 2.5
// or 5 x 10^k with at most six intervals.
std::pair<double, int> niceAxis(double v)
{
    if (!(v > 0))
        return {1.0, 6};
    const double p = std::pow(10.0, std::floor(std::log10(v / 6)));
    for (double scale : {1.0, 10.0})
        for (double m : {1.0, 2.0, 2.5, 5.0}) {
            const double step = m * p * scale;
            const int intervals = static_cast<int>(std::ceil(v / step - 1e-9));
            if (intervals <= 6)
                return {intervals * step, intervals + 1};
        }
    return {v, 2};
}

// Every series and axis off the chart, before it is drawn anew.
void clearChart(QChart *chart)
{
    chart->removeAllSeries();
    const auto oldAxes = chart->axes();
    for (QAbstractAxis *a : oldAxes) {
        chart->removeAxis(a);
        delete a;
    }
}

// A chart at `size` for a file, laid out at that size first (issue 31 row 2): the view's grab
// after a resize drew a never-shown chart at its default 360x260 (legend cut) and a shown one
// with its old layout's axes under the new. The chart item is resized and its layout run now,
// the scene rendered, and the old geometry put back.
QPixmap renderView(QChartView *view, const QSize &size)
{
    QChart *chart = view->chart();
    if (!size.isValid() || !chart || !chart->scene())
        return view->grab();
    const QRectF old = chart->geometry();
    paintChart(chart, filePalette());
    chart->setGeometry(QRectF(QPointF(0, 0), QSizeF(size)));
    if (chart->layout())
        chart->layout()->activate();
    QPixmap p(size);
    p.fill(Qt::white);
    {
        QPainter painter(&p);
        painter.setRenderHint(QPainter::Antialiasing);
        chart->scene()->render(&painter, QRectF(QPointF(0, 0), QSizeF(size)), chart->sceneBoundingRect());
    }
    chart->setGeometry(old);
    paintChart(chart, QApplication::palette());
    if (chart->layout())
        chart->layout()->activate();
    return p;
}

} // namespace

BreakdownChart::BreakdownChart(QWidget *parent)
    : QWidget(parent)
    , m_chart(new QChart)
    , m_view(makeView(m_chart, this))
    , m_bars(new QStackedBarSeries)
    , m_axisX(new QBarCategoryAxis)
    , m_axisLineX(new QValueAxis)
    , m_axisY(new QValueAxis)
    , m_capacity(new QLineSeries)
    , m_usable(new QLineSeries)
    , m_reserveBand(new QAreaSeries(m_capacity, m_usable))
{
    m_sets.resize(BreakdownModel::kUnattributedRow + 1);
    // The unattributed measured total stacks first (at the bottom), under the measured slack and context.
    // A reference copy stacks right on the weights it copies.
    const int reference = static_cast<int>(headroom::Category::ReferenceModel);
    std::vector<int> order = {BreakdownModel::kUnattributedRow, 0, reference};
    for (int row = 1; row < BreakdownModel::kUnattributedRow; ++row)
        if (row != reference)
            order.push_back(row);
    for (int row : order) {
        auto *set = new QBarSet(BreakdownModel::rowLabel(row));
        set->setColor(categoryColor(row));
        set->setBorderColor(categoryColor(row).darker(140));
        set->setSelectedColor(categoryColor(row).darker(135)); // measured bars are a shade darker
        m_bars->append(set);
        m_sets[static_cast<size_t>(row)] = set;
        connect(set, &QBarSet::hovered, this, [this, row](bool on, int column) {
            if (!on || !m_model) {
                QToolTip::hideText();
                return;
            }
            QToolTip::showText(QCursor::pos(), m_model->data(m_model->index(row, column), Qt::ToolTipRole).toString(),
                               m_view);
        });
    }
    m_bars->setBarWidth(0.6);
    m_chart->addSeries(m_bars);
    m_chart->addAxis(m_axisX, Qt::AlignBottom);
    m_chart->addAxis(m_axisY, Qt::AlignLeft);
    m_bars->attachAxis(m_axisX);
    m_bars->attachAxis(m_axisY);

    QPen capPen(QColor(0xb3, 0x26, 0x1e));
    capPen.setWidth(2);
    capPen.setStyle(Qt::DashLine);
    m_reserveBand->setName(tr("Reserve"));
    m_reserveBand->setColor(QColor(0xb3, 0x26, 0x1e, 40));
    m_reserveBand->setBorderColor(Qt::transparent);
    m_chart->addSeries(m_reserveBand);
    m_capacity->setPen(capPen);
    m_chart->addSeries(m_capacity);
    m_chart->addAxis(m_axisLineX, Qt::AlignBottom);
    m_axisLineX->setVisible(false);
    for (QAbstractSeries *s : {static_cast<QAbstractSeries *>(m_reserveBand), static_cast<QAbstractSeries *>(m_capacity)}) {
        s->attachAxis(m_axisLineX);
        s->attachAxis(m_axisY);
    }
}

void BreakdownChart::setModel(BreakdownModel *model)
{
    m_model = model;
    connect(model, &QAbstractItemModel::modelReset, this, &BreakdownChart::refresh);
    connect(model, &QAbstractItemModel::dataChanged, this, &BreakdownChart::refresh);
    refresh();
}

void BreakdownChart::setCapacity(int64_t capacityBytes, int64_t usableBytes, const QString &gpuName)
{
    if (capacityBytes == m_capacityBytes && usableBytes == m_usableBytes && gpuName == m_gpuName)
        return;
    m_capacityBytes = capacityBytes;
    m_usableBytes = usableBytes;
    m_gpuName = gpuName;
    refresh();
}

void BreakdownChart::refresh()
{
    if (!m_model)
        return;
    const Unit u = m_model->units();
    const int columns = m_model->columnCount();
    QStringList labels;
    for (int c = 0; c < columns; ++c)
        labels << m_model->headerData(c, Qt::Horizontal).toString();
    if (m_axisX->categories() != labels) {
        m_axisX->clear();
        m_axisX->append(labels);
    }
    double top = toUnit(m_capacityBytes, u);
    std::vector<double> totals(static_cast<size_t>(columns), 0.0);
    const QList<QLegendMarker *> markers = m_chart->legend()->markers(m_bars);
    for (int row = 0; row < m_model->rowCount(); ++row) {
        QList<qreal> values;
        bool any = false;
        for (int c = 0; c < columns; ++c) {
            const auto bytes = m_model->data(m_model->index(row, c), BreakdownModel::BytesRole).toLongLong();
            values << toUnit(bytes, u);
            totals[static_cast<size_t>(c)] += values.back();
            any = any || bytes != 0;
        }
        QBarSet *set = m_sets[static_cast<size_t>(row)];
        if (set->count() != values.size()) {
            set->remove(0, set->count());
            set->append(values);
        } else {
            for (int c = 0; c < columns; ++c)
                if (set->at(c) != values[c])
                    set->replace(c, values[c]);
        }
        set->deselectAllBars();
        for (int c = 0; c < columns; ++c)
            if (m_model->data(m_model->index(row, c), BreakdownModel::MeasuredRole).toBool())
                set->selectBar(c);
        for (QLegendMarker *marker : markers)
            if (static_cast<QBarLegendMarker *>(marker)->barset() == set)
                marker->setVisible(any);
    }
    // Where the memory goes without hovering: each legend entry carries its bytes at the
    // estimate's peak (the "Estimated" bar, or the tallest estimated phase), and the measured
    // bytes after a slash where a measurement is shown.
    // The measured twin is the bar right after the estimated one (the same phase, or the step).
    int peakCol = -1, measuredCol = -1;
    auto isMeasured = [&](int c) {
        for (int row = 0; row < m_model->rowCount(); ++row)
            if (m_model->data(m_model->index(row, c), BreakdownModel::MeasuredRole).toBool())
                return true;
        return false;
    };
    for (int c = 0; c < columns; ++c)
        if (!isMeasured(c) && (peakCol < 0 || totals[size_t(c)] > totals[size_t(peakCol)]))
            peakCol = c;
    if (peakCol >= 0 && peakCol + 1 < columns && isMeasured(peakCol + 1))
        measuredCol = peakCol + 1;
    // With several bars (by phase) the legend's numbers are one bar's: say which (issue 31 row 6:
    // beside the optimizer's bar of allocator slack the legend read the peak phase's 7 GiB).
    const QString legendOf = columns > 2 && peakCol >= 0
                                 ? tr("Legend: each category's bytes at %1, the highest estimated bar%2")
                                       .arg(m_model->headerData(peakCol, Qt::Horizontal).toString(),
                                            measuredCol >= 0 ? tr(" (and its measured twin)") : QString())
                                 : QString();
    if (m_chart->title() != legendOf)
        m_chart->setTitle(legendOf);
    // A measurement without a split by category (an older probe result) is one grey bar: the
    // categories then carry the estimate's number only, and the grey entry the measured total.
    const bool measuredUnsplit =
        measuredCol >= 0 &&
        m_model->data(m_model->index(BreakdownModel::kUnattributedRow, measuredCol), BreakdownModel::BytesRole).toLongLong() != 0;
    for (int row = 0; row < m_model->rowCount(); ++row) {
        QString text = BreakdownModel::rowLabel(row);
        auto bytesAt = [&](int c) { return m_model->data(m_model->index(row, c), BreakdownModel::BytesRole).toLongLong(); };
        const auto number = [&](int c) { return QLocale().toString(toUnit(bytesAt(c), u), 'f', 2); };
        const QString unit = QString::fromLatin1(u == Unit::GiB ? "GiB" : "GB");
        if (row == BreakdownModel::kUnattributedRow) {
            if (measuredCol >= 0 && bytesAt(measuredCol) != 0)
                text += QStringLiteral("  ") + number(measuredCol) + QLatin1Char(' ') + unit;
        } else if (peakCol >= 0 && (bytesAt(peakCol) != 0 || (measuredCol >= 0 && bytesAt(measuredCol) != 0))) {
            // "15.11 / 15.09 GiB": estimated / measured, in the bars' left-to-right order.
            text += QStringLiteral("  ") + number(peakCol);
            if (measuredCol >= 0 && !measuredUnsplit)
                text += QStringLiteral(" / ") + number(measuredCol);
            text += QLatin1Char(' ') + unit;
        }
        QBarSet *set = m_sets[static_cast<size_t>(row)];
        if (set->label() != text)
            set->setLabel(text);
    }
    // The y axis fits the data: a step that uses under 30% of the card is drawn at its own
    // scale, and the card's line (off the top) says so in the legend.
    double tallest = 0.0;
    for (double t : totals)
        tallest = std::max(tallest, t);
    const bool fitData = tallest > 0.0 && tallest < 0.3 * top;
    m_capacity->setName(fitData ? tr("%1 %2 (off the top)")
                                      .arg(m_gpuName, QString::fromStdString(formatBytes(m_capacityBytes, u, 1)))
                                : tr("%1 capacity").arg(m_gpuName));
    top = fitData ? tallest * 1.15 : std::max(top, tallest);
    // A nice range from the data alone (QValueAxis::applyNiceNumbers starts from the axis's
    // current tick count, so the same configuration got 0-150 fresh and 0-200 after a larger
    // one: issue 31 row 7): a step of 1, 2, 2.5 or 5 x 10^k giving four to six intervals.
    const auto [yMax, ticks] = niceAxis(std::max(top, 1.0) * 1.05);
    m_axisY->setRange(0, yMax);
    m_axisY->setTickCount(ticks);
    m_axisY->setTitleText(QString::fromLatin1(u == Unit::GiB ? "GiB" : "GB"));
    // Whole numbers unless the ticks are closer than one (a small model): never two equal labels.
    const double tick = yMax / std::max(1, ticks - 1);
    m_axisY->setLabelFormat(tick < 1.0 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
    const double lo = -0.5, hi = std::max(columns, 1) - 0.5;
    m_axisLineX->setRange(lo, hi);
    const double cap = toUnit(m_capacityBytes, u), usable = toUnit(m_usableBytes, u);
    m_capacity->replace(QList<QPointF>{{lo, cap}, {hi, cap}});
    m_usable->replace(QList<QPointF>{{lo, usable}, {hi, usable}});
    paintChart(m_chart, QApplication::palette()); // axes made anew take the default colours
}

QPair<qreal, qreal> BreakdownChart::yRange() const
{
    return {m_axisY->min(), m_axisY->max()};
}

QString BreakdownChart::title() const
{
    return m_chart->title();
}

int BreakdownChart::yTickCount() const
{
    return m_axisY->tickCount();
}

QList<qreal> BreakdownChart::values(int row) const
{
    QList<qreal> v;
    const QBarSet *set = m_sets.at(static_cast<size_t>(row));
    for (int i = 0; i < set->count(); ++i)
        v << set->at(i);
    return v;
}

QStringList BreakdownChart::barLabels() const
{
    return m_axisX->categories();
}

qreal BreakdownChart::capacityLine() const
{
    return m_capacity->count() > 0 ? m_capacity->at(0).y() : 0.0;
}

QPixmap BreakdownChart::toPixmap(const QSize &size) const
{
    return renderView(m_view, size);
}

ScalingChart::ScalingChart(const QString &title, const QString &xTitle, QWidget *parent)
    : QWidget(parent)
    , m_chart(new QChart)
    , m_view(makeView(m_chart, this))
    , m_xTitle(xTitle)
{
    m_chart->setTitle(title);
    m_chart->legend()->setAlignment(Qt::AlignBottom);
}

namespace {

QString shortCount(int64_t v)
{
    if (v >= 1024 && v % 1024 == 0)
        return QString::number(v / 1024) + QLatin1Char('k');
    return QString::number(v);
}

double log2d(int64_t v)
{
    return std::log2(static_cast<double>(v));
}

} // namespace

void ScalingChart::setContent(const std::vector<ScalingCurve> &curves, int64_t current, int64_t capacityBytes,
                              Unit units)
{
    clearChart(m_chart);
    // x is log2 of the variable, labelled with the variable itself (128, 256, ... 4k, 8k).
    auto *x = new QCategoryAxis;
    x->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    x->setTitleText(m_xTitle);
    auto *y = new QValueAxis;
    y->setTitleText(QString::fromLatin1(units == Unit::GiB ? "GiB on the device" : "GB on the device"));
    y->setLabelFormat(QStringLiteral("%.0f"));
    m_chart->addAxis(x, Qt::AlignBottom);
    m_chart->addAxis(y, Qt::AlignLeft);
    int64_t xmin = 0, xmax = 0;
    for (const ScalingCurve &c : curves) {
        auto *s = new QLineSeries;
        s->setName(c.name);
        QPen pen(c.checkpointing ? QColor(0x59, 0xa1, 0x4f) : QColor(0x4e, 0x79, 0xa7));
        pen.setWidth(2);
        s->setPen(pen);
        for (const auto &[xv, bytes] : c.points) {
            s->append(log2d(xv), toUnit(bytes, units));
            xmin = xmin == 0 ? xv : std::min(xmin, xv);
            xmax = std::max(xmax, xv);
        }
        m_chart->addSeries(s);
        s->attachAxis(x);
        s->attachAxis(y);
    }
    if (xmin == 0) {
        paintChart(m_chart, QApplication::palette());
        return;
    }
    // every power of two up to seven labels, else every other one: ten in half a 1280-pixel
    // window were elided to "1… 2… 5…" (issue 31 row 3)
    int labels = 0;
    for (int64_t v = xmin; v <= xmax; v *= 2)
        ++labels;
    const int every = labels > 7 ? 2 : 1;
    x->setStartValue(log2d(xmin) - every);
    int i = 0;
    for (int64_t v = xmin; v <= xmax; v *= 2, ++i)
        if (i % every == 0)
            x->append(shortCount(v), log2d(v));
    const double cap = toUnit(capacityBytes, units);
    auto *capLine = new QLineSeries;
    capLine->setName(tr("capacity"));
    QPen capPen(QColor(0xb3, 0x26, 0x1e));
    capPen.setStyle(Qt::DashLine);
    capPen.setWidth(2);
    capLine->setPen(capPen);
    capLine->append(log2d(xmin), cap);
    capLine->append(log2d(xmax), cap);
    m_chart->addSeries(capLine);
    capLine->attachAxis(x);
    capLine->attachAxis(y);
    auto *marker = new QScatterSeries;
    marker->setName(tr("current"));
    marker->setMarkerSize(9);
    marker->setColor(Qt::black);
    for (const ScalingCurve &c : curves)
        for (const auto &[xv, bytes] : c.points)
            if (xv == current)
                marker->append(log2d(xv), toUnit(bytes, units));
    m_chart->addSeries(marker);
    marker->attachAxis(x);
    marker->attachAxis(y);
    x->setRange(log2d(xmin), log2d(xmax));
    // Clip at twice the card so the capacity line stays readable; what is above does not fit.
    y->setRange(0, niceCeiling(cap * 2.0));
    paintChart(m_chart, QApplication::palette()); // axes made anew take the default colours
}

QStringList ScalingChart::seriesNames() const
{
    QStringList out;
    for (const QAbstractSeries *series : m_chart->series())
        out << series->name();
    return out;
}

QStringList ScalingChart::xLabels() const
{
    return categoryLabels(m_chart);
}

int ScalingChart::seriesCount() const
{
    return static_cast<int>(m_chart->series().size());
}

QPixmap ScalingChart::toPixmap(const QSize &size) const
{
    return renderView(m_view, size);
}

TimelineChart::TimelineChart(QWidget *parent)
    : QWidget(parent)
    , m_chart(new QChart)
    , m_view(makeView(m_chart, this))
{
    m_chart->setTitle(tr("Memory over one steady training step"));
    m_chart->legend()->setAlignment(Qt::AlignBottom);
}

void TimelineChart::setContent(const std::vector<double> &x, const std::vector<std::vector<int64_t>> &stacked,
                               const std::vector<std::pair<double, int64_t>> &measured, const QString &measuredName,
                               const std::vector<TimelineBand> &bands, Unit units)
{
    clearChart(m_chart);
    auto *ax = new QCategoryAxis;
    ax->setLabelsPosition(QCategoryAxis::AxisLabelsPositionCenter);
    ax->setTitleText(tr("the step's allocations, in order (forward, backward, optimizer)"));
    auto *ay = new QValueAxis;
    ay->setTitleText(QString::fromLatin1(units == Unit::GiB ? "GiB allocated" : "GB allocated"));
    ay->setLabelFormat(QStringLiteral("%.1f"));
    m_chart->addAxis(ax, Qt::AlignBottom);
    m_chart->addAxis(ay, Qt::AlignLeft);
    double xmax = x.empty() ? 1.0 : x.back();
    for (const TimelineBand &b : bands) {
        ax->append(b.label, b.to);
        xmax = std::max(xmax, b.to);
    }
    ax->setRange(0, xmax);
    double ymax = 0;
    std::vector<double> base(x.size(), 0.0);
    for (size_t c = 0; c < stacked.size(); ++c) {
        bool any = false;
        for (int64_t v : stacked[c])
            any = any || v > 0;
        if (!any)
            continue;
        auto *lower = new QLineSeries;
        auto *upper = new QLineSeries;
        for (size_t i = 0; i < x.size() && i < stacked[c].size(); ++i) {
            lower->append(x[i], base[i]);
            base[i] += toUnit(stacked[c][i], units);
            upper->append(x[i], base[i]);
            ymax = std::max(ymax, base[i]);
        }
        auto *area = new QAreaSeries(upper, lower);
        area->setName(QString::fromLatin1(headroom::toString(headroom::kAllCategories[c]).data()));
        area->setColor(categoryColor(static_cast<int>(c)));
        area->setBorderColor(categoryColor(static_cast<int>(c)).darker(115));
        m_chart->addSeries(area);
        area->attachAxis(ax);
        area->attachAxis(ay);
        connect(area, &QAreaSeries::hovered, this, [this](const QPointF &p, bool state) {
            if (state)
                emit hovered(p.x());
        });
    }
    if (!measured.empty()) {
        auto *line = new QLineSeries;
        line->setName(measuredName);
        QPen pen(QApplication::palette().color(QPalette::WindowText));
        pen.setWidthF(1.6);
        line->setPen(pen);
        line->setProperty("followsText", true); // black on a light chart, light on a dark one
        for (const auto &[px, b] : measured) {
            line->append(px, toUnit(b, units));
            ymax = std::max(ymax, toUnit(b, units));
        }
        m_chart->addSeries(line);
        line->attachAxis(ax);
        line->attachAxis(ay);
        connect(line, &QLineSeries::hovered, this, [this](const QPointF &p, bool state) {
            if (state)
                emit hovered(p.x());
        });
    }
    // Round ticks (0 / 25 / 50 / 75 / 100 / 125), not quarters of the peak: the step of 1, 2, 2.5
    // or 5 x 10^k that gives four to six intervals up to the peak plus 5%.
    const double top = ymax > 0 ? ymax * 1.05 : 1.0;
    const double p10 = std::pow(10.0, std::floor(std::log10(top / 4)));
    double step = p10;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (top / (m * p10) <= 6) {
            step = m * p10;
            break;
        }
    const int intervals = std::max(1, static_cast<int>(std::ceil(top / step - 1e-9)));
    ay->setRange(0, intervals * step);
    ay->setTickCount(intervals + 1);
    ay->setLabelFormat(step < 1.0 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
    paintChart(m_chart, QApplication::palette()); // axes made anew take the default colours
}

int TimelineChart::seriesCount() const
{
    return static_cast<int>(m_chart->series().size());
}

QPixmap TimelineChart::toPixmap(const QSize &size) const
{
    return renderView(m_view, size);
}

QColor opKindColor(int kind)
{
    static const QColor colors[] = {
        QColor(0x4e, 0x79, 0xa7), // attention
        QColor(0xf2, 0x8e, 0x2b), // MLP and experts
        QColor(0x76, 0xb7, 0xb2), // norms
        QColor(0xb0, 0x7a, 0xa1), // LoRA
        QColor(0x59, 0xa1, 0x4f), // logits and loss
        QColor(0xed, 0xc9, 0x48), // embedding
        QColor(0xba, 0xb0, 0xac), // residuals and other
    };
    return kind >= 0 && kind < static_cast<int>(std::size(colors)) ? colors[kind] : QColor(Qt::gray);
}

LayerChart::LayerChart(QWidget *parent)
    : QWidget(parent)
    , m_chart(new QChart)
    , m_view(makeView(m_chart, this))
{
    m_chart->legend()->setVisible(false); // the panel's table names the kinds in these colours
}

void LayerChart::setContent(const QStringList &labels, const std::vector<std::vector<int64_t>> &stacked,
                            const QStringList &kindNames, Unit units, const QString &title)
{
    clearChart(m_chart);
    m_chart->setTitle(title);
    auto *bars = new QStackedBarSeries;
    double top = 0;
    std::vector<double> totals(static_cast<size_t>(labels.size()), 0.0);
    for (size_t k = 0; k < stacked.size(); ++k) {
        auto *set = new QBarSet(k < static_cast<size_t>(kindNames.size()) ? kindNames[static_cast<int>(k)] : QString());
        set->setColor(opKindColor(static_cast<int>(k)));
        set->setBorderColor(opKindColor(static_cast<int>(k)).darker(140));
        for (size_t i = 0; i < stacked[k].size(); ++i) {
            const double v = toUnit(stacked[k][i], units);
            *set << v;
            if (i < totals.size())
                totals[i] += v;
        }
        bars->append(set);
    }
    for (double t : totals)
        top = std::max(top, t);
    bars->setBarWidth(0.8);
    m_chart->addSeries(bars);
    // At most about twelve names, on their bars: every n-th layer (a category axis names every
    // bar, and elides them all past a dozen), and the last bar's own name.
    const int every = std::max<int>(1, static_cast<int>((labels.size() + 11) / 12));
    auto *x = new QCategoryAxis;
    x->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    x->setStartValue(-0.5);
    for (int i = 0; i < labels.size(); ++i)
        if (i % every == 0 || i == labels.size() - 1)
            x->append(labels[i], i);
    x->setRange(-0.5, std::max<double>(0.5, static_cast<double>(labels.size()) - 0.5));
    x->setGridLineVisible(false);
    x->setTitleText(tr("decoder layer"));
    auto *y = new QValueAxis;
    const auto [yTop, ticks] = niceAxis(top);
    y->setRange(0, yTop);
    y->setTickCount(ticks);
    y->setLabelFormat(QStringLiteral("%.3g"));
    y->setTitleText(QString::fromLatin1(toString(units).data()));
    m_chart->addAxis(x, Qt::AlignBottom);
    m_chart->addAxis(y, Qt::AlignLeft);
    bars->attachAxis(x);
    bars->attachAxis(y);
    paintChart(m_chart, QApplication::palette()); // axes made anew take the default colours
}

int LayerChart::barCount() const
{
    const auto series = m_chart->series();
    auto *bars = series.isEmpty() ? nullptr : qobject_cast<QStackedBarSeries *>(series.front());
    return bars && bars->count() > 0 ? static_cast<int>(bars->barSets().front()->count()) : 0;
}

QList<qreal> LayerChart::values(int kind) const
{
    const auto series = m_chart->series();
    if (series.isEmpty())
        return {};
    auto *bars = qobject_cast<QStackedBarSeries *>(series.front());
    if (!bars || kind < 0 || kind >= bars->count())
        return {};
    QList<qreal> out;
    const QBarSet *set = bars->barSets()[kind];
    for (int i = 0; i < set->count(); ++i)
        out << set->at(i);
    return out;
}

QStringList LayerChart::shownLabels() const
{
    return categoryLabels(m_chart);
}

QPixmap LayerChart::toPixmap(const QSize &size) const
{
    return renderView(m_view, size);
}
