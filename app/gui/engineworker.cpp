#include "engineworker.h"

EngineWorker::EngineWorker(QObject *parent) : QObject(parent) {}

EngineWorker::~EngineWorker() { stop(); }

void EngineWorker::start(const QString &probe, const QString &python)
{
    if (m_process && python == m_python)
        return;
    stop(); // another interpreter: the old worker's imports are not this one's
    if (probe.isEmpty())
        return;
    m_dir = std::make_unique<QTemporaryDir>(QStringLiteral("/tmp/headroom-worker-XXXXXX"));
    if (!m_dir->isValid())
        return;
    m_socket = m_dir->filePath(QStringLiteral("engine.sock"));
    m_python = python;
    m_ready = false;
    m_buffer.clear();
    m_process = new QProcess(this);
    QStringList args{QStringLiteral("--engine"), QStringLiteral("transformers"), QStringLiteral("--serve"), m_socket,
                     QStringLiteral("--idle-s"), QStringLiteral("3600")};
    if (!python.isEmpty())
        args << QStringLiteral("--python") << python;
    m_process->setProcessChannelMode(QProcess::SeparateChannels);
    connect(m_process, &QProcess::readyReadStandardOutput, this, [this] {
        m_buffer += m_process->readAllStandardOutput();
        if (m_buffer.size() > 65536)
            m_buffer = m_buffer.right(65536);
        if (!m_ready && m_buffer.contains("\"event\": \"worker_ready\"")) {
            m_ready = true;
            emit ready();
        }
    });
    connect(m_process, &QProcess::readyReadStandardError, this, [this] { m_process->readAllStandardError(); });
    connect(m_process, &QProcess::finished, this, [this] {
        m_ready = false;
        m_process->deleteLater();
        m_process = nullptr;
    });
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart || !m_process)
            return;
        m_ready = false;
        m_process->deleteLater();
        m_process = nullptr;
    });
    m_process->start(probe, args);
}

void EngineWorker::stop()
{
    m_ready = false;
    if (!m_process)
        return;
    QProcess *p = m_process;
    m_process = nullptr;
    p->disconnect(this);
    p->terminate(); // the worker removes its socket and exits; a child mid-run is the caller's to stop
    if (!p->waitForFinished(2000)) {
        p->kill();
        p->waitForFinished(1000);
    }
    delete p;
}
