#pragma once

#include <QObject>
#include <QProcess>
#include <QTemporaryDir>

#include <memory>

// The transformers engine's warm worker (docs/estimator.md Note [Warm worker]): headroom-probe
// --serve on a socket in a private temporary folder, owned by the explorer and stopped with it.
// A run is handed to it by HEADROOM_ENGINE_WORKER=socketFor(); a worker that is not ready, or has
// gone, leaves runs to start fresh, so it only ever saves time.
class EngineWorker : public QObject
{
    Q_OBJECT
public:
    explicit EngineWorker(QObject *parent = nullptr);
    ~EngineWorker() override;

    // Starts the worker unless one runs already (a no-op then). python: empty for the probe's default.
    void start(const QString &probe, const QString &python);
    void stop();
    // The socket once the worker said it is ready and while it runs, for a run with the same
    // interpreter (python: empty for the probe's default); empty otherwise.
    QString socketFor(const QString &python) const { return m_ready && python == m_python ? m_socket : QString(); }
    bool isRunning() const { return m_process != nullptr; }

signals:
    void ready();

private:
    QProcess *m_process = nullptr;
    std::unique_ptr<QTemporaryDir> m_dir;
    QString m_socket;
    QString m_python;
    QByteArray m_buffer;
    bool m_ready = false;
};
