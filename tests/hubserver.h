#pragma once
// tests/hub_server.py as a test fixture: the Hub's URL layout on a loopback port, logging every
// request, and an environment that points Hub lookups at it with a fresh cache and no token.

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>

struct HubServer
{
    QProcess proc;
    QTemporaryDir dir;
    int port = 0;
    bool start()
    {
        proc.start(QStringLiteral("python3"), {QStringLiteral(HEADROOM_SOURCE_DIR "/tests/hub_server.py"),
                                                QStringLiteral("--log"), log()});
        if (!proc.waitForStarted(10000) || !proc.waitForReadyRead(10000))
            return false;
        port = proc.readLine().trimmed().toInt();
        return port > 0;
    }
    QString log() const { return dir.filePath(QStringLiteral("requests.log")); }
    QStringList requests() const
    {
        QFile f(log());
        if (!f.open(QIODevice::ReadOnly))
            return {};
        return QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    }
    QString endpoint() const { return QStringLiteral("http://127.0.0.1:%1").arg(port); }
    ~HubServer()
    {
        proc.closeWriteChannel();
        if (!proc.waitForFinished(3000))
            proc.kill();
        proc.waitForFinished(1000);
    }
};

// Issue 32, row 1: the requests that reached the redirect's target (another host: the log's
// /TinyLlama/ paths) carry no token, and the endpoint's own carry `token`. Returns the first line
// that breaks that, or empty; `redirected` counts the target's requests.
inline QString tokenLeft(const QStringList &log, const QString &token, int *redirected)
{
    *redirected = 0;
    for (const QString &line : log) {
        const bool atTarget = line.startsWith(QStringLiteral("GET /TinyLlama/"));
        *redirected += atTarget ? 1 : 0;
        if (atTarget ? line.contains(QStringLiteral("Bearer")) : !line.endsWith(QStringLiteral("Bearer ") + token))
            return line;
    }
    return {};
}

inline const char *const kHubVariables[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                            "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH"};

// An environment with nothing of the user's Hugging Face set-up: a fresh cache, no token.
inline QProcessEnvironment hubEnv(const QString &endpoint, const QString &cache)
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char *k : kHubVariables)
        env.remove(QString::fromLatin1(k));
    env.insert(QStringLiteral("HF_ENDPOINT"), endpoint);
    env.insert(QStringLiteral("HF_HUB_CACHE"), cache);
    env.insert(QStringLiteral("HF_HOME"), cache + QStringLiteral("/home"));
    return env;
}

// The same, for code that runs in the test's own process (the explorer's widgets).
inline void useHubInThisProcess(const QString &endpoint, const QString &cache)
{
    for (const char *k : kHubVariables)
        qunsetenv(k);
    qputenv("HF_ENDPOINT", endpoint.toUtf8());
    qputenv("HF_HUB_CACHE", cache.toUtf8());
    qputenv("HF_HOME", (cache + QStringLiteral("/home")).toUtf8());
}
