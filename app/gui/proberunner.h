#pragma once

#include "headroom/measurement.h"

#include <QObject>
#include <QProcess>
#include <QTimer>

#include <optional>

// Runs headroom-probe through QProcess and turns its JSON-lines protocol
// (docs/probe-protocol.md) into typed signals. Never blocks; the GUI survives any probe.
class ProbeRunner : public QObject
{
    Q_OBJECT
public:
    struct Options
    {
        QString program;    // the probe; with a prefix, its path on the remote side
        QStringList prefix; // e.g. {"ssh", "gpu-box"} or {"srun", "--gpus=1"}: arguments, no shell
        QString device = QStringLiteral("auto");
        int steps = 2;
        int timeoutSeconds = 600;
        QString allocConf; // PYTORCH_CUDA_ALLOC_CONF for the probe
        QString engine = QStringLiteral("libtorch"); // libtorch | transformers
        QString python;    // the transformers engine's interpreter (empty: the probe's default)
        bool shareGpu = false; // transformers engine: several ranks on one GPU
        // transformers engine: trace the step on fake tensors into this file instead of running it
        // (docs/estimator.md Note [Traced step]); success is traced(), not finished().
        QString traceTimeline;
        // transformers engine on this machine: a warm worker's socket (EngineWorker), handed to
        // the engine as HEADROOM_ENGINE_WORKER; empty: a fresh process imports everything itself.
        QString workerSocket;
    };

    explicit ProbeRunner(QObject *parent = nullptr);
    ~ProbeRunner() override;

    // $HEADROOM_PROBE, then the configured path, then next to this executable (installed or in
    // the build tree), then PATH. Empty if none; `searched` lists where it looked.
    static QString locateProbe(const QString &configured, QStringList *searched = nullptr);
    // The last failure's field: for exit 4, "device" (no usable GPU: the CPU can still measure)
    // or "package" (software this machine lacks: it cannot).
    QString lastErrorField() const { return m_errorField; }
    // The program and arguments that start() runs, for display and tests.
    static QStringList commandLine(const Options &o);

    bool start(const headroom::ProbeRequest &request, const Options &options);
    void cancel(); // SIGTERM, then kill; reported as stopped(), not as a failure
    bool isRunning() const;

signals:
    void progress(double fraction, const QString &what);
    void finished(const headroom::Measurement &m); // success, or an out-of-memory result
    void failed(const QString &message, int exitCode); // exitCode -1: crashed / did not start
    void stopped();
    void traced(const QString &timelinePath); // a trace (Options::traceTimeline) was written

private:
    void onStdout();
    void onFinished(int exitCode, QProcess::ExitStatus status);
    void handleLine(const QByteArray &line);
    QString stderrTail() const;

    QProcess *m_process = nullptr;
    QTimer m_timeout;
    QTimer m_killTimer;
    QByteArray m_buffer;
    QByteArray m_stderr;
    std::optional<headroom::Measurement> m_result;
    QString m_traceTimeline;
    QString m_errorMessage;
    QString m_errorField; // the error event's field: for exit 4, "device" or "package"
    QString m_garbage; // the first line that was not protocol
    bool m_cancelled = false;
    bool m_timedOut = false;
    int m_timeoutSeconds = 0;
};
