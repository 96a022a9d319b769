#include "session.h"

#include "tracer.h"
#include "qtutil.h"

#include "headroom/serialize.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include <QElapsedTimer>
#include <QUndoCommand>
#include <QtConcurrent/QtConcurrentRun>

using namespace headroom;

namespace {

// One undoable change of the scenario. An edit from a control (`source` set) merges with the
// previous one when it came from the same control soon after, so a slider drag is one undo step;
// an edit that lands back where it started drops out. Named changes (a recommendation, an
// import) never merge.
class ScenarioCommand : public QUndoCommand
{
public:
    ScenarioCommand(Session *s, Scenario before, Scenario after, const QString &text, const void *source)
        : QUndoCommand(text)
        , m_session(s)
        , m_before(std::move(before))
        , m_after(std::move(after))
        , m_source(source)
    {
        m_clock.start();
    }
    void undo() override { m_session->setScenario(m_before); }
    void redo() override { m_session->setScenario(m_after); }
    int id() const override { return m_source ? 0x4544 : -1; }
    bool mergeWith(const QUndoCommand *other) override
    {
        const auto *o = static_cast<const ScenarioCommand *>(other);
        if (o->m_source != m_source || m_clock.elapsed() > 1500)
            return false;
        m_after = o->m_after;
        m_clock.restart();
        setObsolete(m_after == m_before);
        return true;
    }

private:
    Session *m_session;
    Scenario m_before, m_after;
    const void *m_source;
    QElapsedTimer m_clock;
};

std::vector<int64_t> powersOfTwo(int64_t lo, int64_t hi)
{
    std::vector<int64_t> v;
    for (int64_t x = lo; x <= hi; x *= 2)
        v.push_back(x);
    return v;
}

// The docs/seeds.md scaling groups around the current configuration: seq x1/2 .. x2, batch x1/2 .. x2,
// and checkpointing off/on, each row with what it costs against the previous one.
void scalingTable(const Scenario &s, ScalingData &out)
{
    const TrainingConfig &base = s.config;
    const auto group = [&](const QString &name, std::vector<int64_t> seqs, std::vector<int64_t> batches,
                           std::vector<bool> ckpt) {
        const auto rows = sweep(s.model, base, s.gpu, seqs, batches, ckpt, s.reserve, {}, estimatorOptions(s));
        for (size_t i = 0; i < rows.size(); ++i)
            out.table.push_back({name, rows[i],
                                 i == 0 ? 0 : rows[i].estimate.deviceTotalBytes - rows[i - 1].estimate.deviceTotalBytes});
    };
    std::vector<int64_t> seqs;
    // GRPO with its prompt's length set: the completion scales, the prompt stays
    const int64_t prompt = base.mode == TrainingMode::GRPO ? base.dpo.promptLen : 0;
    for (int64_t L = std::max<int64_t>(128, (base.seqLen - prompt) / 4); L <= (base.seqLen - prompt) * 2; L *= 2)
        seqs.push_back(prompt + L);
    std::vector<int64_t> batches;
    for (int64_t b = std::max<int64_t>(1, base.microBatch / 4); b <= base.microBatch * 2; b *= 2)
        batches.push_back(b);
    group(QStringLiteral("seq"), seqs, {}, {});
    group(QStringLiteral("batch"), {}, batches, {});
    group(QStringLiteral("checkpointing"), {}, {}, {false, true});
}

} // namespace

Session::Session(QObject *parent)
    : QObject(parent)
    , m_scenario(defaultScenario())
{
    connect(&m_watcher, &QFutureWatcher<Computed>::finished, this, [this] {
        m_running = false;
        const Computed c = m_watcher.result();
        const bool current = c.generation == m_generation;
        land(c);
        if (m_pending) {
            launch();
        } else if (current && c.quick && c.report.error.empty()) {
            m_running = true; // the advice and curves for the same scenario
            m_watcher.setFuture(QtConcurrent::run(&Session::compute, m_generation, m_scenario, false));
        }
    });
    launch();
}

Session::~Session()
{
    m_watcher.waitForFinished();
}

// The full passes of the last few scenarios, process-wide: going back to a configuration (undo, a
// toggle and back, another window) shows its advice and curves at once instead of computing them
// again. A full pass is a function of the scenario alone (a traced model's report is made in
// land(), not here), so what is kept is what would be computed. A handful: each holds its
// estimates' simulated runs (a few MB for a 70B model).
struct Session::KeptPasses
{
    static constexpr size_t kCount = 6;
    std::mutex mutex;
    std::list<std::pair<Scenario, Computed>> passes; // most recent first
};

Session::KeptPasses &Session::keptPasses()
{
    static KeptPasses kept;
    return kept;
}

void Session::forgetComputed()
{
    KeptPasses &k = keptPasses();
    const std::lock_guard<std::mutex> lock(k.mutex);
    k.passes.clear();
}

Session::Computed Session::compute(quint64 generation, const Scenario &s, bool quick)
{
    KeptPasses &kept = keptPasses();
    {
        const std::lock_guard<std::mutex> lock(kept.mutex);
        for (auto it = kept.passes.begin(); it != kept.passes.end(); ++it)
            if (it->first == s) {
                kept.passes.splice(kept.passes.begin(), kept.passes, it);
                Computed c = it->second;
                c.generation = generation;
                return c; // the full pass, even when a quick one was asked for
            }
    }
    Computed c;
    c.generation = generation;
    c.quick = quick;
    c.report = buildReport(s, !quick);
    if (quick || !c.report.error.empty())
        return c;
    // Runs on a worker thread: nothing may escape it (QFutureWatcher::result() would rethrow it
    // on the GUI thread). A point that cannot be estimated (bytes beyond 64 bits at batch 1024 x
    // 128k tokens) ends its curve there.
    const EstimatorOptions opt = estimatorOptions(s);
    auto point = [&](const TrainingConfig &cfg) -> std::optional<int64_t> {
        try {
            return estimate(s.model, cfg, opt).deviceTotalBytes;
        } catch (const std::exception &) {
            return std::nullopt;
        }
    };
    // GRPO simulates every generated token (Note [GRPO step]): its curve stops at 16k tokens of
    // completion, each point the prompt (where set) then the completion
    const bool grpo = s.config.mode == TrainingMode::GRPO;
    const int64_t prompt = grpo ? s.config.dpo.promptLen : 0;
    const int64_t seqMax = std::min<int64_t>(grpo ? 16384 : 131072, std::max<int64_t>(s.model.maxPositions, 128));
    // A vision-language step simulates its tower over every image of the micro-batch (Note [Vision
    // step]): its batch curve stops at the first point past the card (a thousand samples' images
    // took minutes), which is where the curve says what it has to say
    const bool pixels = s.config.vision.any();
    for (bool ckpt : {false, true}) {
        // short: both fit the legend of a chart half a 1280-pixel window wide (issue 31 row 3)
        const QString name = ckpt ? QStringLiteral("checkpointed") : QStringLiteral("plain");
        ScalingCurve seq{name, ckpt, {}}, batch{name, ckpt, {}};
        TrainingConfig cfg = s.config;
        cfg.gradCheckpointing = ckpt;
        for (int64_t L : powersOfTwo(128, seqMax)) {
            cfg.seqLen = prompt + L;
            const auto v = point(cfg);
            if (!v)
                break;
            seq.points.emplace_back(cfg.seqLen, *v);
        }
        cfg.seqLen = s.config.seqLen;
        for (int64_t b : powersOfTwo(1, 1024)) {
            cfg.microBatch = b;
            const auto v = point(cfg);
            if (!v)
                break;
            batch.points.emplace_back(b, *v);
            if (pixels && *v > s.gpu.memoryBytes)
                break;
        }
        c.scaling.bySeq.push_back(std::move(seq));
        c.scaling.byBatch.push_back(std::move(batch));
    }
    try {
        scalingTable(s, c.scaling);
    } catch (const std::exception &) {
        c.scaling.table.clear(); // a row beyond what can be estimated: no table rather than a crash
    }
    const std::lock_guard<std::mutex> lock(kept.mutex);
    kept.passes.emplace_front(s, c);
    if (kept.passes.size() > KeptPasses::kCount)
        kept.passes.pop_back();
    return c;
}

void Session::launch()
{
    if (m_running) {
        m_pending = true; // the running job's result will be stale; run again when it lands
        return;
    }
    m_pending = false;
    m_running = true;
    m_watcher.setFuture(QtConcurrent::run(&Session::compute, m_generation, m_scenario, true));
}

QString Session::traceStatus() const
{
    return m_tracer ? m_tracer->status() : QString();
}

void Session::setTraceWorker(std::function<QString(const QString &python)> socketFor)
{
    m_traceWorker = std::move(socketFor);
    if (m_tracer)
        m_tracer->setWorker(m_traceWorker);
}

void Session::useTrace(Report &r)
{
    if (r.error.empty() || r.scenario.model.estimable || r.scenario.model.hfConfig.is_null())
        return;
    if (!m_tracer) {
        m_tracer = new Tracer(this);
        m_tracer->setWorker(m_traceWorker);
        connect(m_tracer, &Tracer::statusChanged, this, &Session::traceStatusChanged);
        connect(m_tracer, &Tracer::landed, this, [this] {
            if (m_report.scenario == m_scenario && !m_report.error.empty()) {
                useTrace(m_report);
                emit reportReady();
            }
        });
    }
    QString failure;
    if (const auto run = m_tracer->traceOf(r.scenario, &failure)) {
        r = buildTracedReport(r.scenario, *run);
    } else if (!failure.isEmpty()) {
        r.error = r.scenario.model.modelType + " has no modelled row and could not be traced: " + failure.toStdString();
        r.fix.reset();
    }
}

void Session::land(Computed c)
{
    if (c.generation != m_generation)
        return; // a newer scenario is on its way
    useTrace(c.report);
    if (c.quick && c.report.error.empty()) {
        // The previous advice stays on screen, marked stale, until the full pass lands.
        std::vector<Recommendation> advice = std::move(m_report.recommendations);
        m_report = std::move(c.report);
        m_report.recommendations = std::move(advice);
        m_adviceStale = true;
    } else {
        m_report = std::move(c.report);
        m_scaling = std::move(c.scaling);
        m_adviceStale = false;
    }
    emit reportReady();
}

void Session::recomputeNow()
{
    m_watcher.waitForFinished();
    m_running = false;
    m_pending = false;
    land(compute(m_generation, m_scenario, false));
}

void Session::setScenario(const Scenario &s)
{
    if (s == m_scenario && m_generation > 0)
        return;
    m_scenario = s;
    ++m_generation;
    emit scenarioChanged();
    launch();
}

void Session::applyScenario(const Scenario &s, const QString &what, const void *source)
{
    if (s == m_scenario)
        return;
    m_undo.push(new ScenarioCommand(this, m_scenario, s, what, source));
}

void Session::setUnits(Unit u)
{
    if (u == m_units)
        return;
    m_units = u;
    emit unitsChanged();
}

void Session::addMeasurement(const Measurement &m)
{
    m_measurements.push_back(m);
    try {
        m_measurementEstimates.emplace_back(estimate(m.model, m.config));
    } catch (const std::exception &) {
        m_measurementEstimates.emplace_back(std::nullopt); // e.g. a model this build cannot estimate
    }
    emit measurementsChanged();
    selectMeasurement(static_cast<int>(m_measurements.size()) - 1);
}

void Session::selectMeasurement(int index)
{
    if (index < -1 || index >= static_cast<int>(m_measurements.size()))
        index = -1;
    if (index == m_selected)
        return;
    m_selected = index;
    emit selectionChanged();
}

void Session::removeMeasurement(int index)
{
    if (index < 0 || index >= static_cast<int>(m_measurements.size()))
        return;
    m_measurements.erase(m_measurements.begin() + index);
    m_measurementEstimates.erase(m_measurementEstimates.begin() + index);
    const int before = m_selected;
    if (m_selected == index)
        m_selected = -1;
    else if (m_selected > index)
        --m_selected;
    emit measurementsChanged();
    if (m_selected != before)
        emit selectionChanged();
}

bool Session::useMeasurementConfiguration(int index)
{
    if (index < 0 || index >= static_cast<int>(m_measurements.size()))
        return false;
    const Measurement &m = m_measurements[static_cast<size_t>(index)];
    Scenario s = m_scenario;
    s.model = m.model;
    s.config = m.config;
    applyScenario(s, tr("Use the configuration of measurement %1").arg(index + 1));
    return true;
}

const Measurement *Session::selectedMeasurement() const
{
    return m_selected >= 0 ? &m_measurements[static_cast<size_t>(m_selected)] : nullptr;
}

void Session::pin()
{
    // The report on screen is the scenario's once it has landed; a traced model's report is only
    // here (buildReport cannot make it again).
    if (m_report.scenario != m_scenario || m_running)
        recomputeNow();
    setPinned(m_scenario, m_report);
}

void Session::unpin()
{
    setPinned(std::nullopt);
}

void Session::setPinned(std::optional<Scenario> s, std::optional<Report> report)
{
    m_pinned = std::move(s);
    m_pinnedReport = !m_pinned ? Report{} : report ? std::move(*report) : buildReport(*m_pinned, false);
    emit pinnedChanged();
}

Sheet Session::toSheet() const
{
    Sheet s;
    s.scenario = m_scenario;
    s.pinned = m_pinned;
    s.units = m_units;
    s.measurements = m_measurements;
    s.selectedMeasurement = m_selected;
    return s;
}

void Session::restore(const Sheet &sheet)
{
    // Linear in the measurements: one estimate per distinct model and configuration (a sheet's
    // runs mostly repeat a few), and one signal at the end, not one per run (issue 15: 1,000
    // measurements took 20 s through addMeasurement's per-run signal and estimate).
    m_selected = -1;
    m_measurements = sheet.measurements;
    m_measurementEstimates.clear();
    m_measurementEstimates.reserve(m_measurements.size());
    std::unordered_map<std::string, std::optional<Estimate>> byConfig;
    for (const auto &m : m_measurements) {
        const std::string key = toJson(m.model).dump() + toJson(m.config).dump();
        auto it = byConfig.find(key);
        if (it == byConfig.end()) {
            std::optional<Estimate> e;
            try {
                e = estimate(m.model, m.config);
            } catch (const std::exception &) {
                // e.g. a model this build cannot estimate
            }
            it = byConfig.emplace(key, std::move(e)).first;
        }
        m_measurementEstimates.push_back(it->second);
    }
    emit measurementsChanged();
    selectMeasurement(sheet.selectedMeasurement);
    setUnits(sheet.units);
    setPinned(sheet.pinned);
    applyScenario(sheet.scenario, tr("Open sheet"));
}
