#include "headroom/budget.h"

#include "levers.h"

#include "headroom/error.h"

#include "headroom/simulation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace headroom {

std::string_view toString(Fit f)
{
    switch (f) {
    case Fit::Fits: return "fits";
    case Fit::Tight: return "tight";
    case Fit::OOM: return "oom";
    }
    return "?";
}

std::string_view toString(RecommendationGroup g)
{
    switch (g) {
    case RecommendationGroup::Dynamic: return "dynamic";
    case RecommendationGroup::Static: return "static";
    case RecommendationGroup::Sharding: return "sharding";
    case RecommendationGroup::Increase: return "increase";
    }
    return "?";
}

// "1234567.5" -> "1,234,567.5"
static std::string groupThousands(std::string n)
{
    const size_t digits0 = !n.empty() && n[0] == '-' ? 1 : 0;
    size_t end = n.find('.');
    if (end == std::string::npos)
        end = n.size();
    for (size_t i = end; i > digits0 + 3; i -= 3)
        n.insert(i - 3, ",");
    return n;
}

std::string formatScaled(int64_t bytes, int decimals, double base, double step, const char *unit, const char *bigUnit)
{
    // From `step` units on (1,024 GiB, 1,000 GB), the next unit up; thousands grouped either way.
    const double big = base * step;
    const bool up = std::abs(static_cast<double>(bytes)) >= big;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 6),
                  static_cast<double>(bytes) / (up ? big : base));
    return groupThousands(buf) + " " + (up ? bigUnit : unit);
}

std::string formatSetting(double v)
{
    std::ostringstream o;
    o << v;
    return o.str();
}

std::string formatParameterCount(int64_t n)
{
    char buf[64];
    const double v = static_cast<double>(n);
    if (std::abs(v) >= 1e9)
        std::snprintf(buf, sizeof buf, "%.2f B", v / 1e9);
    else if (std::abs(v) >= 1e6)
        std::snprintf(buf, sizeof buf, "%.1f M", v / 1e6);
    else
        return groupThousands(std::to_string(n));
    return groupThousands(buf) + " (" + groupThousands(std::to_string(n)) + ")";
}

std::string headroomPhrase(const Verdict &v)
{
    char buf[96];
    if (v.capacityBytes > 0 && v.neededBytes > 2 * v.capacityBytes) {
        // Far past the card a percentage says nothing: how many cards' worth it needs.
        const double times = static_cast<double>(v.neededBytes) / static_cast<double>(v.capacityBytes);
        std::snprintf(buf, sizeof buf, times < 100 ? "%.1f" : "%.0f", times);
        return groupThousands(buf) + "× the card";
    }
    const double pct = std::abs(v.headroomFraction()) * 100.0;
    std::snprintf(buf, sizeof buf, "%.1f%% %s", pct, v.headroomBytes() >= 0 ? "headroom" : "over the card");
    return buf;
}

std::string formatGiB(int64_t bytes, int decimals)
{
    return formatScaled(bytes, decimals, 1073741824.0, 1024.0, "GiB", "TiB");
}

int64_t processCapacityBytes(const GpuSpec &gpu, int64_t driverReservedBytes)
{
    return std::max<int64_t>(0, gpu.memoryBytes - std::max<int64_t>(0, driverReservedBytes));
}

Verdict judge(const Estimate &e, const GpuSpec &gpu, double reserve)
{
    if (!(reserve >= 0.0 && reserve < 1.0))
        throw InputError("reserve", std::to_string(reserve), "must be in [0, 1)");
    Verdict v;
    v.reserve = reserve;
    v.capacityBytes = processCapacityBytes(gpu, e.driverReservedBytes);
    if (e.colocatedShare > 0.0) { // a colocated vLLM's share of the card (Note [GRPO step])
        v.colocatedBytes = static_cast<int64_t>(std::ceil(e.colocatedShare * static_cast<double>(gpu.memoryBytes)));
        v.capacityBytes = std::max<int64_t>(0, v.capacityBytes - v.colocatedBytes);
    }
    v.usableBytes = static_cast<int64_t>(std::floor(static_cast<double>(v.capacityBytes) * (1.0 - reserve)));
    v.neededBytes = e.deviceTotalBytes;
    v.fit = v.neededBytes <= v.usableBytes ? Fit::Fits : v.neededBytes <= v.capacityBytes ? Fit::Tight : Fit::OOM;
    return v;
}

// See Note [At the card's limit] (docs/estimator.md).
Verdict judge(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu, double reserve,
              const EstimatorOptions &opt)
{
    Verdict v = judge(e, gpu, reserve);
    if (v.fit == Fit::Fits || !isSimulated(c) || opt.ledgerOnly)
        return v; // the ledger has no allocation stream to replay
    // What the device gives the allocator: the budget less what lives outside it (the CUDA
    // context, NCCL's communicator). At a failed cudaMalloc, CUDACachingAllocator's malloc()
    // frees the cached blocks that could serve the request (release_available_cached_blocks),
    // then every cached segment (release_cached_blocks), and retries before it raises.
    const int64_t outside = e.deviceTotalBytes - e.peakReservedBytes;
    // What is allocated at the peak cannot be freed by any flush: past the card with it alone,
    // the run cannot fit, and the replay (a second simulation) is not needed.
    if (checkedAdd(e.peakAllocatedBytes, outside) > v.capacityBytes)
        return v;
    // The run as the estimate replayed it (its second steady step too), at the card's limit; an
    // estimate without it (made elsewhere, or read back) is simulated again.
    std::shared_ptr<const Timeline> run = e.run; // a traced estimate has no model row: its run is all there is
    if (!run) {
        m.validate();
        c.validate();
        run = std::make_shared<const Timeline>(simulateMeasuredRun(m, c, opt));
    }
    const Timeline &t = *run;
    auto runsWithin = [&](int64_t budget) {
        AllocatorConfig ac = opt.allocator;
        ac.capacityBytes = budget - outside;
        if (ac.capacityBytes <= 0)
            return false;
        const Replay r = replay(t, ac);
        if (r.outOfMemory)
            return false;
        v.cacheFlushes = r.retries;
        v.unboundedBytes = v.neededBytes;
        v.neededBytes = r.peakReservedBytes + outside; // what nvidia-smi shows at its highest
        return true;
    };
    if (runsWithin(v.usableBytes))
        v.fit = Fit::Fits;
    else if (v.fit == Fit::OOM && runsWithin(v.capacityBytes))
        v.fit = Fit::Tight;
    return v;
}

std::string cacheFlushNote(const Verdict &v)
{
    if (v.cacheFlushes <= 0)
        return {};
    return "the allocator's cache would grow to " + formatGiB(v.unboundedBytes, 1) + " with the context; at the " +
           "budget it frees its cached blocks and retries (" + std::to_string(v.cacheFlushes) +
           (v.cacheFlushes == 1 ? " time" : " times") +
           " in the warm-up and two steps), so the step runs, each retry costing a device synchronize";
}

namespace {

// The largest v in [lo, hi] with fitsAt(v), for a fitsAt that holds up to some value and not
// past it; 0 when not even lo fits. Galloping from `from` (the configuration's own value, where
// the answer usually is near): doubling steps until one does not fit, then bisecting that last
// step, so an answer A costs about 2 log2(A / from) estimates instead of log2(hi).
template<typename Set>
int64_t largestFitting(int64_t lo, int64_t hi, int64_t from, const Set &fitsAt)
{
    from = std::clamp(from, lo, hi);
    if (fitsAt(from)) {
        lo = from;
    } else { // below the configuration's value: gallop up from lo
        if (from == lo || !fitsAt(lo))
            return 0;
        hi = from - 1;
    }
    for (int64_t step = 1; lo < hi; step *= 2) { // invariant: fitsAt(lo)
        const int64_t probe = hi - lo > step ? lo + step : hi;
        if (!fitsAt(probe)) {
            hi = probe - 1;
            break;
        }
        lo = probe;
    }
    while (lo < hi) { // invariant: fitsAt(lo), !fitsAt(hi + 1)
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (fitsAt(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// The largest value of one field (set through `apply` to value x unit) in [unit, hi x unit] that
// fits, or 0; the search starts from the configuration's own value, `current`.
template<typename Apply>
int64_t solve(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve,
              const EstimatorOptions &opt, int64_t hi, int64_t unit, int64_t current, Apply apply)
{
    return unit * largestFitting(1, hi, current / unit, [&](int64_t v) {
        TrainingConfig t = c;
        apply(t, v * unit);
        return advice::fitsOn(m, t, gpu, reserve, opt); // beyond 64-bit bytes: certainly does not fit
    });
}
} // namespace

int64_t maxMicroBatch(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve,
                      const EstimatorOptions &opt)
{
    return solve(m, c, gpu, reserve, opt, 1 << 20, 1, c.microBatch,
                 [](TrainingConfig &t, int64_t v) { t.microBatch = v; });
}

int64_t maxSeqLen(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve,
                  const EstimatorOptions &opt, int64_t multiple)
{
    if (multiple < 1 || multiple > (1 << 20))
        throw InputError("multiple", std::to_string(multiple), "must be in [1, 1048576]");
    return solve(m, c, gpu, reserve, opt, (int64_t(1) << 24) / multiple, multiple, c.seqLen,
                 [](TrainingConfig &t, int64_t v) { t.seqLen = v; });
}

int64_t Room::microBatch() const
{
    if (m_microBatch < 0)
        m_microBatch = maxMicroBatch(m_m, m_c, m_gpu, m_reserve, m_opt);
    return m_microBatch;
}

int64_t Room::seqLen() const
{
    // GRPO: a longer sequence is a longer generation, each token of it simulated; the search over
    // lengths a card could hold is left to max-seq (seconds a probe), not run for every estimate
    if (m_seqLen < 0)
        m_seqLen = m_c.mode == TrainingMode::GRPO ? 0 : maxSeqLen(m_m, m_c, m_gpu, m_reserve, m_opt, 128);
    return m_seqLen;
}

std::vector<std::string> cardNotes(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                                   double reserve, const EstimatorOptions &opt, const Room *shared)
{
    std::vector<std::string> out;
    const bool bf16 = c.precision == Precision::BF16 || c.precision == Precision::AmpBF16;
    if (bf16 && !gpu.bf16)
        out.push_back(gpu.name + " has no bf16: use fp16 mixed precision (amp-fp16, with a GradScaler)");
    const Verdict here = judge(m, c, e, gpu, reserve, opt);
    if (here.fit != Fit::Fits && here.colocatedBytes > 0) {
        // GRPO beside a colocated vLLM: the largest gpu_memory_utilization that leaves the step
        // its need within the reserve (Note [GRPO step]: vLLM's share is modelled)
        const double withoutVllm = static_cast<double>(here.capacityBytes + here.colocatedBytes);
        const double room = withoutVllm - static_cast<double>(here.neededBytes) / (1.0 - reserve);
        const double share = std::floor(room / static_cast<double>(gpu.memoryBytes) * 100.0) / 100.0;
        char text[160];
        if (share >= 0.05)
            std::snprintf(text, sizeof text,
                          "with vllm_gpu_memory_utilization %.2f (now %.2f) the step fits beside vLLM, whose KV cache "
                          "gets smaller (fewer sequences generated at once)",
                          share, e.colocatedShare);
        else
            std::snprintf(text, sizeof text, "no share left for a colocated vLLM: run it as a server on other GPUs "
                                             "(vllm_mode: server)");
        out.push_back(text);
    }
    if (here.fit != Fit::Fits) {
        // The smallest card of the catalog this configuration fits as it is, if any.
        const GpuSpec *best = nullptr;
        for (const GpuSpec &g : gpuCatalog())
            if (g.memoryBytes > gpu.memoryBytes && (!best || g.memoryBytes < best->memoryBytes) &&
                judge(m, c, e, g, reserve, opt).fit == Fit::Fits)
                best = &g;
        out.push_back(best ? "as it is, it fits " + best->name + " (the smallest card in the catalog that holds it)"
                           : "as it is, it fits no single card in the catalog: change it, or shard it across GPUs");
        return out;
    }
    const Room own(m, c, gpu, reserve, opt);
    const Room &grow = shared ? *shared : own;
    const int64_t b = grow.microBatch(), s = grow.seqLen();
    std::string room = "room to grow on " + gpu.name + ":";
    if (b > c.microBatch)
        room += " micro-batch up to " + std::to_string(b) + " (at sequence " + std::to_string(c.seqLen) + ")";
    if (s > c.seqLen)
        room += std::string(b > c.microBatch ? ", or" : "") + " sequence up to " + std::to_string(s) +
                " (multiples of 128, at micro-batch " + std::to_string(c.microBatch) + ")";
    if (b > c.microBatch || s > c.seqLen)
        out.push_back(room + ", keeping the " + std::to_string(std::lround(reserve * 100)) + "% reserve");
    return out;
}

std::vector<Recommendation> recommend(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve,
                                      const EstimatorOptions &opt, const Room *shared)
{
    const Room own(m, c, gpu, reserve, opt);
    const Room &room = shared ? *shared : own;
    std::vector<Recommendation> out;
    const Estimate base = estimate(m, c, opt);
    auto consider = [&](RecommendationGroup g, std::string id, std::string title, std::string cost, TrainingConfig t) {
        Estimate e;
        int64_t from = base.deviceTotalBytes;
        try {
            e = estimate(m, t, opt);
            if (isSimulated(c) && !isSimulated(t)) {
                // The alternative only has the ledger's estimate: the saving is measured ledger
                // against ledger, so it is the change's, not the two mechanisms' difference.
                EstimatorOptions ledger = opt;
                ledger.ledgerOnly = true;
                from = estimate(m, c, ledger).deviceTotalBytes;
            }
        } catch (const InputError &) {
            return; // an alternative Headroom cannot estimate is not advice
        }
        const int64_t saving = from - e.deviceTotalBytes;
        if (saving <= 0 || saving < from / 200)
            return; // a change that saves less than 0.5% of the total is not advice

        Recommendation r{g, std::move(id), std::move(title), std::move(cost), saving,
                         judge(m, t, e, gpu, reserve, opt).fit == Fit::Fits, t};
        out.push_back(std::move(r));
    };
    using G = RecommendationGroup;
    // 1-3. Each lever on its own, in the order of advice: the dynamic peak, the static base,
    // sharding (advice/levers.cpp).
    const advice::LeverContext x{m, c, gpu, reserve, opt, base, room};
    for (const advice::Lever &l : advice::levers())
        for (advice::Change &k : l.alone(x))
            consider(l.group, std::move(k.id), std::move(k.title), std::move(k.cost), std::move(k.config));
    // 4. When no single change fits on this card and GPU count: the shortest cumulative plan, the
    // levers' steps cheapest first, that does.
    const bool baseFits = judge(m, c, base, gpu, reserve, opt).fit == Fit::Fits;
    bool anyFits = false;
    for (const auto &r : out)
        anyFits = anyFits || (r.fitsAfter && r.group != G::Sharding);
    if (!baseFits && !anyFits) {
        std::vector<const advice::Lever *> plan;
        for (const advice::Lever &l : advice::levers())
            if (l.planOrder > 0 && l.inPlan(c))
                plan.push_back(&l);
        std::stable_sort(plan.begin(), plan.end(), [](const advice::Lever *a, const advice::Lever *b) {
            return a->planOrder < b->planOrder;
        });
        TrainingConfig t = c;
        std::vector<std::string> steps, costs;
        bool fits = false;
        for (const advice::Lever *l : plan) {
            TrainingConfig n = t;
            l->applyInPlan(x, n);
            try {
                const Estimate e = estimate(m, n, opt);
                t = n;
                steps.push_back(l->planWhat(c));
                costs.push_back(l->planCost);
                if (judge(m, n, e, gpu, reserve, opt).fit == Fit::Fits) {
                    fits = true;
                    break;
                }
            } catch (const InputError &) {
                // a step Headroom cannot estimate is skipped
            }
        }
        if (fits && steps.size() > 1) {
            std::string title = "Plan: ", cost;
            for (size_t i = 0; i < steps.size(); ++i) {
                title += (i ? " + " : "") + steps[i];
                cost += (i ? "; " : "") + steps[i] + ": " + costs[i];
            }
            const Estimate e = estimate(m, t, opt);
            out.insert(out.begin(), Recommendation{G::Dynamic, "plan", title, cost, base.deviceTotalBytes - e.deviceTotalBytes,
                                                   true, t});
        }
    }
    // 5. It fits: how much more it can take on this card, each a configuration to apply.
    if (baseFits) {
        auto grow = [&](std::string id, std::string title, std::string cost, TrainingConfig t) {
            try {
                const Estimate e = estimate(m, t, opt);
                if (judge(m, t, e, gpu, reserve, opt).fit != Fit::Fits)
                    return;
                out.push_back(Recommendation{G::Increase, std::move(id), std::move(title), std::move(cost),
                                             base.deviceTotalBytes - e.deviceTotalBytes, true, t});
            } catch (const InputError &) {
            }
        };
        const int64_t most = room.microBatch();
        if (most > c.microBatch) {
            TrainingConfig t = c;
            const int64_t effective = c.microBatch * c.gradAccum;
            // With accumulation, the largest micro-batch that divides the effective batch keeps
            // it exactly (fewer steps, same batch), and only such a divisor is offered (issue 13);
            // without, the largest that fits.
            int64_t b = most;
            bool keeps = false;
            if (c.gradAccum > 1)
                for (int64_t d = most; d > c.microBatch; --d)
                    if (effective % d == 0) {
                        b = d;
                        keeps = true;
                        break;
                    }
            if (c.gradAccum <= 1 || keeps) {
                t.microBatch = b;
                if (keeps)
                    t.gradAccum = effective / b;
                grow("more-batch",
                     keeps ? "Micro-batch " + std::to_string(b) + " x accumulation " + std::to_string(t.gradAccum)
                           : "Micro-batch up to " + std::to_string(b),
                     keeps ? "accumulation " + std::to_string(t.gradAccum) + " keeps the effective batch (" +
                                 std::to_string(effective) + "); fewer, larger steps"
                           : "a larger effective batch: retune the learning rate",
                     t);
            }
        }
        const int64_t seq = room.seqLen();
        if (seq > c.seqLen) {
            TrainingConfig t = c;
            t.seqLen = seq;
            grow("longer-seq", "Sequences up to " + std::to_string(seq) + " tokens",
                 "longer samples fit whole; more memory per token of attention and activations", t);
        }
    }
    return out;
}

std::vector<SweepRow> sweep(const ModelArch &m, const TrainingConfig &base, const GpuSpec &gpu,
                            const std::vector<int64_t> &seqs, const std::vector<int64_t> &batches,
                            const std::vector<bool> &checkpointing, double reserve,
                            const std::function<bool(size_t, size_t)> &progress, const EstimatorOptions &opt)
{
    const std::vector<int64_t> S = seqs.empty() ? std::vector<int64_t>{base.seqLen} : seqs;
    const std::vector<int64_t> B = batches.empty() ? std::vector<int64_t>{base.microBatch} : batches;
    const std::vector<bool> K = checkpointing.empty() ? std::vector<bool>{base.gradCheckpointing} : checkpointing;
    // A grid is a table someone reads: 100,000 cells is far past that, and a bound keeps a typo
    // (a list pasted twice, a range written out) from becoming std::bad_alloc.
    constexpr size_t kMaxCells = 100000;
    if (S.size() > kMaxCells || B.size() > kMaxCells || S.size() * B.size() * K.size() > kMaxCells)
        throw InputError("sweep", std::to_string(S.size()) + " x " + std::to_string(B.size()) + " x " +
                                      std::to_string(K.size()) + " cells",
                         "at most 100000 configurations per sweep: fewer sequence lengths or batches");
    const size_t total = S.size() * B.size() * K.size();
    std::vector<SweepRow> rows;
    rows.reserve(total);
    auto ratio = [](int64_t a, int64_t b) {
        std::ostringstream o;
        const double r = static_cast<double>(a) / static_cast<double>(b);
        if (r == std::floor(r))
            o << "x" << static_cast<int64_t>(r);
        else
            o << "x" << std::round(r * 100) / 100;
        return o.str();
    };
    for (bool k : K)
        for (int64_t b : B)
            for (int64_t s : S) {
                TrainingConfig t = base;
                t.seqLen = s;
                t.microBatch = b;
                t.gradCheckpointing = k;
                SweepRow row;
                row.config = t;
                row.estimate = estimate(m, t, opt);
                row.verdict = judge(m, t, row.estimate, gpu, reserve, opt);
                if (rows.empty()) {
                    row.grows = "baseline";
                } else {
                    const auto &f = rows.front().config;
                    std::string g;
                    auto add = [&](const std::string &p) { g += (g.empty() ? "" : ", ") + p; };
                    if (s != f.seqLen)
                        add("seq " + ratio(s, f.seqLen));
                    if (b != f.microBatch)
                        add("batch " + ratio(b, f.microBatch));
                    if (k != f.gradCheckpointing)
                        add(k ? "checkpointing on" : "checkpointing off");
                    row.grows = g.empty() ? "same" : g;
                }
                rows.push_back(std::move(row));
                if (progress && !progress(rows.size(), total))
                    return rows;
            }
    return rows;
}

namespace {
std::string label(const TrainingConfig &c)
{
    return "b" + std::to_string(c.microBatch) + " x s" + std::to_string(c.seqLen) + (c.gradCheckpointing ? " +ckpt" : "");
}
} // namespace

std::string sweepMarkdown(const std::vector<SweepRow> &rows)
{
    std::ostringstream o;
    o << "| config | what grows | peak allocated | peak reserved | fits? |\n|---|---|---:|---:|---|\n";
    for (const auto &r : rows)
        o << "| " << label(r.config) << " | " << r.grows << " | " << formatGiB(r.estimate.peakAllocatedBytes) << " | "
          << formatGiB(r.estimate.peakReservedBytes) << " | " << toString(r.verdict.fit) << " |\n";
    return o.str();
}

std::string sweepCsv(const std::vector<SweepRow> &rows)
{
    std::ostringstream o;
    o << "config,batch,seq,grad_checkpointing,what_grows,peak_allocated_bytes,peak_reserved_bytes,device_total_bytes,fits\n";
    for (const auto &r : rows)
        o << '"' << label(r.config) << "\"," << r.config.microBatch << ',' << r.config.seqLen << ','
          << (r.config.gradCheckpointing ? "true" : "false") << ",\"" << r.grows << "\","
          << r.estimate.peakAllocatedBytes << ',' << r.estimate.peakReservedBytes << ','
          << r.estimate.deviceTotalBytes << ',' << toString(r.verdict.fit) << '\n';
    return o.str();
}

} // namespace headroom
