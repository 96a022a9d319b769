#include "proberunner.h"

#include "qtutil.h"

#include "headroom/error.h"
#include "headroom/protocol.h"
#include "headroom/serialize.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>

#include <cstdio>

using namespace headroom;
using nlohmann::json;

ProbeRunner::ProbeRunner(QObject *parent)
    : QObject(parent)
{
    m_timeout.setSingleShot(true);
    m_killTimer.setSingleShot(true);
    // Stopping, for a cancel, a timeout or the window closing, is one teardown: SIGTERM, which the
    // probe forwards to the engine's process group, then SIGKILL only after the probe's own grace
    // for the engine (protocol::kProbeStopGraceMs), so that no engine outlives it.
    connect(&m_timeout, &QTimer::timeout, this, [this] {
        m_timedOut = true;
        if (m_process) {
            m_process->terminate();
            m_killTimer.start(protocol::kProbeStopGraceMs);
        }
    });
    connect(&m_killTimer, &QTimer::timeout, this, [this] {
        if (m_process)
            m_process->kill(); // the backstop: the probe honours SIGTERM well within its grace
    });
}

ProbeRunner::~ProbeRunner()
{
    if (m_process) {
        m_process->disconnect(this);
        m_process->terminate();
        if (!m_process->waitForFinished(protocol::kProbeStopGraceMs))
            m_process->kill();
        m_process->waitForFinished(1000);
    }
}

QString ProbeRunner::locateProbe(const QString &configured, QStringList *searched)
{
    QStringList candidates;
    const QString env = qEnvironmentVariable("HEADROOM_PROBE");
    if (!env.isEmpty())
        candidates << env;
    if (!configured.isEmpty())
        candidates << configured;
    const QString appDir = QCoreApplication::applicationDirPath();
    candidates << appDir + QStringLiteral("/headroom-probe")                  // installed side by side
               << appDir + QStringLiteral("/../probes/headroom-probe")        // build tree: build/x/app
               << appDir + QStringLiteral("/../../probes/headroom-probe")     // build tree: build/x/app/gui
               << appDir + QStringLiteral("/../libexec/headroom/headroom-probe");
    const QString onPath = QStandardPaths::findExecutable(QStringLiteral("headroom-probe"));
    if (!onPath.isEmpty())
        candidates << onPath;
    if (searched)
        *searched = candidates;
    for (const QString &c : std::as_const(candidates)) {
        const QFileInfo fi(c);
        if (fi.isFile() && fi.isExecutable())
            return QDir::cleanPath(fi.absoluteFilePath());
    }
    return {};
}

namespace {
// One argument for a POSIX shell: as it is when it is plain, else in single quotes.
QString shellQuoted(const QString &arg)
{
    static const QRegularExpression plain(QStringLiteral("^[A-Za-z0-9_./=:,+@%-]+$"));
    if (plain.match(arg).hasMatch())
        return arg;
    QString q = arg;
    q.replace(QLatin1Char('\''), QStringLiteral("'\\''"));
    return QLatin1Char('\'') + q + QLatin1Char('\'');
}
} // namespace

QStringList ProbeRunner::commandLine(const Options &o)
{
    QStringList cmd;
    cmd << o.program << QStringLiteral("--request") << QStringLiteral("-") << QStringLiteral("--device") << o.device
        << QStringLiteral("--steps") << QString::number(o.steps);
    if (!o.allocConf.isEmpty())
        cmd << QStringLiteral("--alloc-conf") << o.allocConf;
    if (o.engine == QLatin1String("transformers")) {
        cmd << QStringLiteral("--engine") << o.engine;
        if (!o.python.isEmpty())
            cmd << QStringLiteral("--python") << o.python;
        if (o.shareGpu)
            cmd << QStringLiteral("--share-gpu");
        if (!o.traceTimeline.isEmpty())
            cmd << QStringLiteral("--trace") << QStringLiteral("--timeline") << o.traceTimeline;
    }
    // ssh joins what follows the host with spaces and hands it to the remote shell, which splits it
    // again: each argument is quoted for that shell, so a path with spaces or a ';' stays one.
    if (!o.prefix.isEmpty() && QFileInfo(o.prefix.first()).fileName() == QLatin1String("ssh"))
        for (QString &a : cmd)
            a = shellQuoted(a);
    return o.prefix + cmd;
}

bool ProbeRunner::isRunning() const
{
    return m_process != nullptr;
}

bool ProbeRunner::start(const ProbeRequest &request, const Options &options)
{
    if (m_process)
        return false;
    m_buffer.clear();
    m_stderr.clear();
    m_result.reset();
    m_errorMessage.clear();
    m_errorField.clear();
    m_garbage.clear();
    m_cancelled = m_timedOut = false;
    m_timeoutSeconds = options.timeoutSeconds;
    m_traceTimeline = options.engine == QLatin1String("transformers") ? options.traceTimeline : QString();

    QStringList cmd = commandLine(options);
    const QString program = cmd.takeFirst();
    m_process = new QProcess(this);
    connect(m_process, &QProcess::readyReadStandardOutput, this, &ProbeRunner::onStdout);
    connect(m_process, &QProcess::readyReadStandardError, this, [this] {
        const QByteArray chunk = m_process->readAllStandardError();
        std::fwrite(chunk.constData(), 1, static_cast<size_t>(chunk.size()), stderr); // forward, as hotspot does
        m_stderr += chunk;
        if (m_stderr.size() > 65536)
            m_stderr = m_stderr.right(65536);
    });
    connect(m_process, &QProcess::finished, this, &ProbeRunner::onFinished);
    connect(m_process, &QProcess::errorOccurred, this, [this, program](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart)
            return; // crashes and kills arrive through finished()
        const QString why = m_process->errorString();
        m_process->deleteLater();
        m_process = nullptr;
        m_timeout.stop();
        emit failed(tr("Could not start the probe (%1): %2").arg(program, why), -1);
    });
    if (!options.workerSocket.isEmpty() && options.prefix.isEmpty() &&
        options.engine == QLatin1String("transformers")) {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("HEADROOM_ENGINE_WORKER"), options.workerSocket);
        m_process->setProcessEnvironment(env);
    }
    m_process->start(program, cmd);
    if (!m_process)
        return false; // failed to start, already reported
    m_process->write(QByteArray::fromStdString(toJson(request).dump()));
    m_process->closeWriteChannel();
    m_timeout.start(options.timeoutSeconds * 1000);
    emit progress(0.0, tr("starting"));
    return true;
}

void ProbeRunner::cancel()
{
    if (!m_process || m_cancelled)
        return;
    m_cancelled = true;
    m_process->terminate();
    m_killTimer.start(protocol::kProbeStopGraceMs);
}

void ProbeRunner::onStdout()
{
    m_buffer += m_process->readAllStandardOutput();
    for (qsizetype nl; (nl = m_buffer.indexOf('\n')) >= 0;) {
        const QByteArray line = m_buffer.left(nl).trimmed();
        m_buffer.remove(0, nl + 1);
        if (!line.isEmpty())
            handleLine(line);
    }
    if (m_buffer.size() > (32 << 20)) { // no line is that long; this is not our protocol
        if (m_garbage.isEmpty())
            m_garbage = QString::fromUtf8(m_buffer.left(80));
        m_buffer.clear();
    }
}

void ProbeRunner::handleLine(const QByteArray &line)
{
    using K = protocol::Line::Kind;
    const protocol::Line l = protocol::parseLine(std::string_view(line.constData(), static_cast<size_t>(line.size())));
    switch (l.kind) {
    case K::Progress: emit progress(l.progress.fraction, qs(protocol::describe(l.progress))); break;
    case K::Result: m_result = l.result; break;
    case K::Error:
        m_errorMessage = qs(l.error.message);
        m_errorField = qs(l.error.field);
        break;
    case K::Malformed: m_errorMessage = tr("The probe's output is malformed: %1").arg(qs(l.problem)); break;
    case K::Stopped:
    case K::Rendezvous: break;
    case K::NotProtocol:
        if (m_garbage.isEmpty())
            m_garbage = QString::fromUtf8(line.left(80));
        break;
    }
}

QString ProbeRunner::stderrTail() const
{
    const QString text = QString::fromUtf8(m_stderr).trimmed();
    const auto lines = text.split(QLatin1Char('\n'));
    return lines.mid(std::max<qsizetype>(0, lines.size() - 3)).join(QStringLiteral(" / "));
}

void ProbeRunner::onFinished(int exitCode, QProcess::ExitStatus status)
{
    onStdout();
    if (!m_buffer.trimmed().isEmpty())
        handleLine(m_buffer.trimmed());
    m_timeout.stop();
    m_killTimer.stop();
    m_process->deleteLater();
    m_process = nullptr;

    if (m_cancelled) {
        emit stopped();
        return;
    }
    if (m_timedOut) {
        emit failed(tr("The probe did not finish within %1 s and was stopped.").arg(m_timeoutSeconds), -1);
        return;
    }
    if (status == QProcess::CrashExit) {
        emit failed(tr("The probe crashed. %1").arg(stderrTail()), -1);
        return;
    }
    if (!m_traceTimeline.isEmpty() && exitCode == 0 && QFileInfo::exists(m_traceTimeline)) {
        emit traced(m_traceTimeline);
        return;
    }
    if (protocol::hasResult(exitCode) && m_result) {
        emit finished(*m_result); // exit 3 carries an OOM result: a finding, not an error
        return;
    }
    const QString detail = !m_errorMessage.isEmpty() ? m_errorMessage : stderrTail();
    switch (exitCode) {
    case protocol::BadRequest: emit failed(tr("The probe refused the request: %1").arg(detail), exitCode); return;
    case protocol::NoDevice:
        // the one reason: a device, or software this machine lacks (then the CPU cannot help)
        if (m_errorField == QLatin1String("package"))
            emit failed(tr("Cannot measure here: %1").arg(detail), exitCode);
        else
            emit failed(tr("No usable GPU or package for the probe: %1").arg(detail), exitCode);
        return;
    case protocol::Internal: emit failed(tr("The probe hit an internal error: %1").arg(detail), exitCode); return;
    default: break;
    }
    if (!m_garbage.isEmpty()) {
        emit failed(tr("The probe's output is not the Headroom protocol (exit code %1): \"%2\"")
                        .arg(exitCode)
                        .arg(m_garbage),
                    exitCode);
        return;
    }
    emit failed(exitCode == 0 ? tr("The probe exited without a result.")
                              : tr("The probe exited with code %1: %2").arg(exitCode).arg(detail),
                exitCode);
}
