#pragma once

// All Qt Charts code lives here (Qt Charts is deprecated from Qt 6.10 in favour of Qt Graphs;
// docs/style.md point 5). Panels see two widgets and never a chart type.

#include "breakdownmodel.h"
#include "session.h"

#include <QWidget>

class QChart;
class QChartView;
class QBarSet;
class QStackedBarSeries;
class QBarCategoryAxis;
class QValueAxis;
class QLineSeries;
class QAreaSeries;

QColor categoryColor(int row); // one colour per BreakdownModel row, shared with legends elsewhere

// Stacked bars read from a BreakdownModel, with the card's capacity as a line and the reserve
// as a band below it.
class BreakdownChart : public QWidget
{
    Q_OBJECT
public:
    explicit BreakdownChart(QWidget *parent = nullptr);
    void setModel(BreakdownModel *model);
    void setCapacity(int64_t capacityBytes, int64_t usableBytes, const QString &gpuName);

    // What the chart draws, in the model's units: bar values of one row (category), for tests.
    QList<qreal> values(int row) const;
    QStringList barLabels() const;
    qreal capacityLine() const; // in units
    QPair<qreal, qreal> yRange() const;
    QString title() const; // what the legend's numbers are, with several bars
    int yTickCount() const;
    QPixmap toPixmap(const QSize &size = {}) const;

private:
    void refresh();

    BreakdownModel *m_model = nullptr;
    QChart *m_chart;
    QChartView *m_view;
    QStackedBarSeries *m_bars;
    std::vector<QBarSet *> m_sets; // one per model row, fixed
    QBarCategoryAxis *m_axisX;
    QValueAxis *m_axisLineX;
    QValueAxis *m_axisY;
    QLineSeries *m_capacity;
    QLineSeries *m_usable;
    QAreaSeries *m_reserveBand;
    QString m_gpuName;
    int64_t m_capacityBytes = 0;
    int64_t m_usableBytes = 0;
};

// Memory over one training step: the estimate's live bytes stacked by category along the events
// of the steady step, phase bands on the x axis, and a measured run's total as a line on top.
struct TimelineBand
{
    double from = 0, to = 0;
    QString label;
};
class TimelineChart : public QWidget
{
    Q_OBJECT
public:
    explicit TimelineChart(QWidget *parent = nullptr);
    // stacked[c][i]: category c's bytes at point i; x[i] its position.
    void setContent(const std::vector<double> &x, const std::vector<std::vector<int64_t>> &stacked,
                    const std::vector<std::pair<double, int64_t>> &measured, const QString &measuredName,
                    const std::vector<TimelineBand> &bands, headroom::Unit units);
    int seriesCount() const;
    QPixmap toPixmap(const QSize &size = {}) const;

signals:
    void hovered(double x); // the x under the mouse, in the content's coordinates

private:
    QChart *m_chart;
    QChartView *m_view;
};

// Peak against one variable (sequence length or batch) on a log2 axis, one line per curve,
// with the capacity line and a marker at the current value.
class ScalingChart : public QWidget
{
    Q_OBJECT
public:
    ScalingChart(const QString &title, const QString &xTitle, QWidget *parent = nullptr);
    void setContent(const std::vector<ScalingCurve> &curves, int64_t current, int64_t capacityBytes,
                    headroom::Unit units);
    int seriesCount() const;
    QStringList seriesNames() const; // as the legend shows them
    QStringList xLabels() const;     // the x axis's tick labels
    QPixmap toPixmap(const QSize &size = {}) const;

private:
    QChart *m_chart;
    QChartView *m_view;
    QString m_xTitle;
};

// Issue 31's per-layer view: one bar per decoder layer (and one for what is outside the layers),
// stacked by the kind of op that made each tensor.
class LayerChart : public QWidget
{
    Q_OBJECT
public:
    explicit LayerChart(QWidget *parent = nullptr);
    // labels[i]: bar i's name; stacked[k][i]: op kind k's bytes in bar i. Shows at most about
    // twelve of the labels (every n-th layer, and the last) so that 80 layers stay readable.
    void setContent(const QStringList &labels, const std::vector<std::vector<int64_t>> &stacked,
                    const QStringList &kindNames, headroom::Unit units, const QString &title);
    int barCount() const;
    QList<qreal> values(int kind) const; // in units
    QStringList shownLabels() const;     // the names the axis shows, in order
    QPixmap toPixmap(const QSize &size = {}) const;

private:
    QChart *m_chart;
    QChartView *m_view;
};

QColor opKindColor(int kind); // one colour per headroom::OpKind
