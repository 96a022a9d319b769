#pragma once

#include "headroom/sheet.h"

#include <QFutureWatcher>
#include <QObject>
#include <QUndoStack>

#include <functional>
#include <optional>

class Tracer;

// What the Scaling tab shows: peak against sequence length and batch, with and without
// checkpointing, and the scaling table of docs/seeds.md.
struct ScalingCurve
{
    QString name;
    bool checkpointing = false;
    std::vector<std::pair<int64_t, int64_t>> points; // (x, device total bytes)
};

struct ScalingData
{
    std::vector<ScalingCurve> bySeq;
    std::vector<ScalingCurve> byBatch;
    struct Row
    {
        QString group; // "seq", "batch", "checkpointing"
        headroom::SweepRow row;
        int64_t deltaBytes = 0; // against the previous row of the group (device total)
    };
    std::vector<Row> table;
};

// The shared state of the explorer: the scenario, its latest report, measurements and undo.
// Recomputation runs off the GUI thread; every request is stamped and only the latest lands
// (docs/style.md point 4).
class Session : public QObject
{
    Q_OBJECT
public:
    explicit Session(QObject *parent = nullptr);
    ~Session() override;

    const headroom::Scenario &scenario() const { return m_scenario; }
    // Sets the scenario without an undo step (undo itself, opening a session, tests).
    void setScenario(const headroom::Scenario &s);
    // Named, undoable changes: a recommendation, an import, an opened sheet; and an edit from a
    // control (`source`): consecutive edits of the same control (a slider drag, typing a number)
    // within a second and a half merge into one step.
    void applyScenario(const headroom::Scenario &s, const QString &what, const void *source = nullptr);
    QUndoStack *undoStack() { return &m_undo; }

    // The report for the latest scenario once it has landed (see isComputing()).
    const headroom::Report &report() const { return m_report; }
    const ScalingData &scaling() const { return m_scaling; }
    bool isComputing() const { return m_running; }
    // True while the shown advice and scaling curves are the previous scenario's.
    bool adviceIsStale() const { return m_adviceStale; }
    quint64 generation() const { return m_generation; }
    // Computes the current scenario on this thread and applies it; for screenshots and tests.
    void recomputeNow();

    // While a model with no modelled row is traced (Tracer): what the banner says; empty otherwise.
    QString traceStatus() const;
    // The warm worker traces go through when it runs (MeasureBar owns it).
    void setTraceWorker(std::function<QString(const QString &python)> socketFor);

    headroom::Unit units() const { return m_units; }
    void setUnits(headroom::Unit u);

    const std::vector<headroom::Measurement> &measurements() const { return m_measurements; }
    // The estimate for each measurement's own configuration, to compute its error.
    const std::vector<std::optional<headroom::Estimate>> &measurementEstimates() const { return m_measurementEstimates; }
    void addMeasurement(const headroom::Measurement &m); // and selects it
    void selectMeasurement(int index);                   // -1: none
    void removeMeasurement(int index);                   // the selection follows
    // The scenario becomes the measurement's model and configuration (undoable); the card, the
    // reserve and the allocator settings stay the user's. False for an index out of range.
    bool useMeasurementConfiguration(int index);
    int selectedIndex() const { return m_selected; }
    const headroom::Measurement *selectedMeasurement() const;

    // Issue 31: a configuration pinned to compare the current one with (the Compare tab, the
    // sheets). Pinning takes the current scenario and its report; the pin stays while the
    // scenario changes, until unpinned or replaced. Not an undo step: it changes no setting.
    void pin();
    void unpin();
    const std::optional<headroom::Scenario> &pinned() const { return m_pinned; }
    const headroom::Report &pinnedReport() const { return m_pinnedReport; } // empty unless pinned

    headroom::Sheet toSheet() const;
    void restore(const headroom::Sheet &sheet);

signals:
    void scenarioChanged(); // at once, so the controls follow undo and recommendations
    void reportReady();     // the report for the latest scenario has landed
    void unitsChanged();
    void measurementsChanged();
    void selectionChanged();
    void traceStatusChanged();
    void pinnedChanged();

private:
    // Two passes per scenario: a quick one (the estimate and the verdicts, one simulated step)
    // that lands at once, then the full one (advice, solvers, scaling curves).
    struct Computed
    {
        quint64 generation = 0;
        bool quick = false;
        headroom::Report report;
        ScalingData scaling;
    };
    static Computed compute(quint64 generation, const headroom::Scenario &s, bool quick);

    // The full passes kept for going back (see compute()).
    struct KeptPasses;
    static KeptPasses &keptPasses();

public:
    // Forgets the full passes kept for going back (see compute()): the benchmark times the work.
    static void forgetComputed();

private:
    void launch();
    void land(Computed c);
    // A report that could not be estimated because the model has no row: the traced report when
    // its trace is done, else the trace is started (and the error report stays, with the status).
    void useTrace(headroom::Report &r);

    headroom::Scenario m_scenario;
    headroom::Report m_report;
    ScalingData m_scaling;
    quint64 m_generation = 0;
    bool m_running = false;
    bool m_pending = false;
    bool m_adviceStale = false;
    QFutureWatcher<Computed> m_watcher;
    QUndoStack m_undo;
    headroom::Unit m_units = headroom::Unit::GiB;
    std::vector<headroom::Measurement> m_measurements;
    std::vector<std::optional<headroom::Estimate>> m_measurementEstimates;
    int m_selected = -1;
    Tracer *m_tracer = nullptr;
    std::function<QString(const QString &python)> m_traceWorker;
    std::optional<headroom::Scenario> m_pinned;
    headroom::Report m_pinnedReport;
    void setPinned(std::optional<headroom::Scenario> s, std::optional<headroom::Report> report = std::nullopt);
};
