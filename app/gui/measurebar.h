#pragma once

#include "engineworker.h"
#include "proberunner.h"
#include "readiness.h"
#include "session.h"

#include <QFutureWatcher>
#include <QWidget>

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;

// "Measure now": runs the probe on the current scenario, shows progress, and adds the result
// to the session. Failures are shown inline; the app never waits on the probe.
class MeasureBar : public QWidget
{
    Q_OBJECT
public:
    explicit MeasureBar(Session *session, QWidget *parent = nullptr);
    ProbeRunner *runner() { return &m_runner; }
    QString statusText() const;
    // The background check of this machine's probe, GPU and packages has not answered yet (its
    // answer changes the status line, so a layout can still move once).
    bool readinessPending() const { return m_readinessPending; }

public slots:
    void measure();
    void measureOn(const QString &device); // auto | cuda | cpu
    void cancel();

protected:
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    void fitStatus(); // the status label as tall as its wrapped text at its width
    void setRunning(bool running);
    void showStatus(const QString &text, const char *color);
    void showFailure(const QString &text);
    // Issue 31 item 5: while idle, what Measure now would do here (the engine, the device, the
    // versions found), or the one thing that stops it and what to install.
    void showPlan();
    void checkReadiness();

    Session *m_session;
    ProbeRunner m_runner;
    QPushButton *m_measure;
    QComboBox *m_device;
    QProgressBar *m_progress;
    QPushButton *m_cancel;
    QLabel *m_status;
    QPushButton *m_cpuInstead;
    const char *m_statusColor = nullptr; // as chosen for a light window (appearance::readable)
    QString m_requestedDevice; // what the last run asked for: "auto", "cuda" or "cpu"
    bool m_failed = false;     // the status shows a failure of the last run
    bool m_answered = false;   // the status shows the last run's result (kept until a change)
    ProbeReadiness m_readiness;
    bool m_readinessPending = false;
    QFutureWatcher<ProbeReadiness> m_readinessWatch;
    EngineWorker m_worker;
    // Starts the warm worker when Settings asks for it and this machine's Python has the
    // transformers engine's packages (the readiness check found them).
    void warmWorker();
};
