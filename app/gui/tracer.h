#pragma once

#include "headroom/sheet.h"
#include "headroom/traced.h"

#include <QObject>
#include <QTemporaryDir>

#include <functional>
#include <map>
#include <memory>

class ProbeRunner;

// The explorer's traces (docs/estimator.md Note [Traced step]): a scenario whose model has no
// modelled row is traced in the background by headroom-probe --engine transformers --trace with
// Settings' interpreter, one trace at a time, the latest scenario's first; a finished trace is
// kept for the session by its request (the model, the configuration) and the interpreter. Never
// blocks; a trace's failure is one line.
class Tracer : public QObject
{
    Q_OBJECT
public:
    explicit Tracer(QObject *parent = nullptr);
    ~Tracer() override;

    // The trace of `s` when it is done; otherwise starts it (stopping one of another scenario) and
    // returns null. A failed trace is reported again as its message in `failure`.
    std::shared_ptr<const headroom::TracedRun> traceOf(const headroom::Scenario &s, QString *failure = nullptr);
    // "Tracing granite with your Python's Transformers… 40%", or empty when idle.
    QString status() const { return m_status; }
    // The warm worker's socket for an interpreter, or empty (Note [Warm worker]): a trace handed
    // to it skips the imports, as a measurement does.
    void setWorker(std::function<QString(const QString &python)> socketFor) { m_workerFor = std::move(socketFor); }

signals:
    void statusChanged();
    void landed(); // a trace finished or failed: ask traceOf again

private:
    std::string keyOf(const headroom::Scenario &s) const;
    void start(const headroom::Scenario &s, const std::string &key);

    ProbeRunner *m_runner = nullptr;
    QTemporaryDir m_dir;
    std::map<std::string, std::shared_ptr<const headroom::TracedRun>> m_done;
    std::map<std::string, QString> m_failed;
    std::string m_running; // the key of the trace in flight
    std::string m_next;    // a key asked for while another was stopping
    headroom::Scenario m_nextScenario;
    QString m_status;
    int m_count = 0;
    std::function<QString(const QString &python)> m_workerFor;
};
