#include "tracer.h"

#include "proberunner.h"
#include "qtutil.h"
#include "settings.h"

#include "headroom/error.h"
#include "headroom/measurement.h"

#include <nlohmann/json.hpp>

using namespace headroom;

Tracer::Tracer(QObject *parent)
    : QObject(parent)
    , m_runner(new ProbeRunner(this))
{
    connect(m_runner, &ProbeRunner::progress, this, [this](double f, const QString &) {
        if (m_running.empty())
            return;
        const QString head = m_status.section(QStringLiteral("… "), 0, 0);
        m_status = head + QStringLiteral("… %1%").arg(std::lround(100.0 * f));
        emit statusChanged();
    });
    connect(m_runner, &ProbeRunner::traced, this, [this](const QString &path) {
        const std::string key = std::exchange(m_running, {});
        try {
            m_done[key] = std::make_shared<const TracedRun>(readTracedRun(path.toStdString()));
        } catch (const std::exception &e) { // nothing escapes to the event loop
            m_failed[key] = tr("The trace could not be read: %1").arg(qs(e.what()));
        }
        m_status.clear();
        emit statusChanged();
        emit landed();
    });
    auto fail = [this](const QString &message) {
        const std::string key = std::exchange(m_running, {});
        if (!key.empty())
            m_failed[key] = message;
        m_status.clear();
        emit statusChanged();
        emit landed();
    };
    connect(m_runner, &ProbeRunner::failed, this, [fail](const QString &message, int) { fail(message); });
    connect(m_runner, &ProbeRunner::stopped, this, [this] {
        m_running.clear();
        m_status.clear();
        if (!m_next.empty()) // stopped for a newer scenario: its trace now
            start(m_nextScenario, std::exchange(m_next, {}));
        else
            emit statusChanged();
    });
}

Tracer::~Tracer()
{
    m_runner->cancel();
}

std::string Tracer::keyOf(const Scenario &s) const
{
    return toJson(traceRequest(s.model, s.config)).dump() + "\n" + Settings().probePython().toStdString();
}

std::shared_ptr<const TracedRun> Tracer::traceOf(const Scenario &s, QString *failure)
{
    const std::string key = keyOf(s);
    if (auto it = m_done.find(key); it != m_done.end())
        return it->second;
    if (auto it = m_failed.find(key); it != m_failed.end()) {
        if (failure)
            *failure = it->second;
        return nullptr;
    }
    if (m_running == key)
        return nullptr;
    if (!m_running.empty()) { // another scenario's trace: stop it, then this one
        m_next = key;
        m_nextScenario = s;
        m_runner->cancel();
        return nullptr;
    }
    start(s, key);
    return nullptr;
}

void Tracer::start(const Scenario &s, const std::string &key)
{
    const Settings settings;
    ProbeRunner::Options o;
    QStringList searched;
    o.program = ProbeRunner::locateProbe(settings.probePath(), &searched);
    if (o.program.isEmpty()) {
        m_failed[key] = tr("headroom-probe, which traces a model with no row, was not found (looked at %1).")
                            .arg(searched.join(QStringLiteral(", ")));
        emit landed();
        return;
    }
    o.engine = QStringLiteral("transformers");
    o.python = settings.probePython();
    o.device = QStringLiteral("cuda");
    o.steps = 1;
    o.timeoutSeconds = 1800;
    o.traceTimeline = m_dir.filePath(QStringLiteral("trace-%1.json").arg(++m_count));
    o.workerSocket = m_workerFor ? m_workerFor(o.python) : QString();
    const ProbeRequest req = traceRequest(s.model, s.config);
    m_running = key;
    m_status = tr("Tracing %1 with your Python's Transformers (fake tensors, no GPU memory)…")
                   .arg(qs(s.model.modelType).toHtmlEscaped());
    if (!m_runner->start(req, o)) {
        m_running.clear();
        m_failed[key] = tr("The trace could not start.");
        m_status.clear();
        emit landed();
        return;
    }
    emit statusChanged();
}
