// estimate(): the training step simulated op by op (core/sim), its timeline replayed through the
// caching-allocator model (core/replay), phase by phase, plus what lives outside the allocator.
// What the simulation does not run yet (optimizer offload, QLoRA under FSDP) goes through the
// per-op ledger (ledger_step.cpp). docs/estimator.md explains each term;
// tests/data/hf_reference_h200.json and the corpus hold the measurements they are checked against
// (tests/tst_accuracy.cpp).

#include "headroom/estimator.h"

#include "step.h"

#include "headroom/support.h"

#include "headroom/error.h"
#include "headroom/simulation.h"
#include "headroom/timeline.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <set>
#include <sstream>

namespace headroom {

int64_t Breakdown::total() const
{
    int64_t t = 0;
    for (auto b : bytes)
        t += b;
    return t;
}

int64_t Breakdown::allocated() const
{
    return total() - (*this)[Category::AllocatorSlack] - (*this)[Category::CudaContext];
}

namespace est {

double defaultSlackFraction()
{
    // Median of (peak reserved - peak allocated) / peak allocated over the first 30 HF runs in
    // tests/data/hf_reference_h200.json (range 1.8% to 40%): fragmentation is path dependent.
    return 0.061;
}

// The step's peak: the forward, backward or optimizer phase with the most allocated (after load
// is never the step's peak), its breakdown the estimate's.
void takePeakPhase(Estimate &est)
{
    const PhaseEstimate *top = &est.phases[1];
    for (size_t i = 2; i < 4; ++i)
        if (est.phases[i].peakAllocatedBytes > top->peakAllocatedBytes)
            top = &est.phases[i];
    for (const PhaseEstimate &p : est.rollout) // GRPO's generation can be the step's peak
        if (p.peakAllocatedBytes > top->peakAllocatedBytes)
            top = &p;
    est.peakPhase = top->phase;
    est.peakAllocatedBytes = top->peakAllocatedBytes;
    est.peak = top->atPeak;
    est.peakVision = top->vision;
}

// Any collective (DDP, or ZeRO at any N) brings up an NCCL communicator.
bool usesCollectives(const TrainingConfig &cfg)
{
    return cfg.worldSize > 1 || cfg.zeroStage >= 1;
}

// See Note [Outside the allocator] (docs/estimator.md).
// The device total (nvidia-smi's Used) is peak reserved plus what lives on the device outside
// PyTorch's allocator: the CUDA context, and NCCL's communicator once a collective runs, whose
// buffers the caching allocator never sees. The driver's reservation goes with the estimate for
// the verdict, which takes it off the card.
void addOutsideAllocator(Estimate &est, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    est.peak[Category::CudaContext] = opt.cudaContextBytes;
    est.deviceTotalBytes = checkedAdd(est.peakReservedBytes, opt.cudaContextBytes);
    est.driverReservedBytes = opt.driverReservedBytes;
    if (cfg.mode == TrainingMode::GRPO && cfg.grpo.vllm && !cfg.grpo.vllmServer) {
        est.colocatedShare = cfg.grpo.vllmGpuMemoryUtilization;
        char share[32];
        std::snprintf(share, sizeof share, "%.2f", cfg.grpo.vllmGpuMemoryUtilization);
        est.notes.push_back(std::string("vLLM colocated holds ") + share +
                            " of the card (vllm_gpu_memory_utilization: its weights, activations and KV cache) beside "
                            "the step, which gets the rest: modelled as vLLM documents it, not measured; a lower "
                            "share leaves the step more and vLLM a smaller KV cache (fewer sequences at once)");
    }
    if (usesCollectives(cfg)) {
        est.peak[Category::Communication] = checkedAdd(est.peak[Category::Communication], opt.ncclCommunicatorBytes);
        est.deviceTotalBytes = checkedAdd(est.deviceTotalBytes, opt.ncclCommunicatorBytes);
    }
}

} // namespace est

const PhaseEstimate &Estimate::phase(Phase p) const
{
    const size_t i = static_cast<size_t>(p);
    if (i < phases.size())
        return phases[i];
    for (const PhaseEstimate &r : rollout)
        if (r.phase == p)
            return r;
    static const PhaseEstimate none{p, 0, 0, {}, {}};
    return none;
}

std::vector<const PhaseEstimate *> Estimate::stepPhases() const
{
    std::vector<const PhaseEstimate *> out{&phases[0]};
    for (const PhaseEstimate &r : rollout)
        out.push_back(&r);
    for (size_t i = 1; i < phases.size(); ++i)
        out.push_back(&phases[i]);
    return out;
}

using namespace est;

namespace {

// Bytes by category live after the first events[k] events (each block rounded as the allocator
// rounds it); in `vision`, the same of the vision tower's and projector's tensors alone.
std::vector<Breakdown> breakdownsAt(const Timeline &t, const std::vector<size_t> &events, std::vector<Breakdown> &vision)
{
    std::vector<Breakdown> out(events.size());
    vision.assign(events.size(), Breakdown{});
    std::vector<size_t> order(events.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return events[a] < events[b]; });
    std::vector<int64_t> size;
    std::vector<uint8_t> cat, part;
    Breakdown cur, curVision;
    // What PyTorch holds before the program's first tensor (replay() allocates it too).
    cur[Category::Temporaries] = t.startupBytes > 0 ? CachingAllocatorModel::roundSize(t.startupBytes) : 0;
    size_t k = 0;
    for (size_t i = 0; i <= t.events.size() && k < order.size(); ++i) {
        while (k < order.size() && events[order[k]] == i) {
            out[order[k]] = cur;
            vision[order[k]] = curVision;
            ++k;
        }
        if (i == t.events.size())
            break;
        const MemEvent &e = t.events[i];
        if (e.id >= size.size()) {
            size.resize(std::max<size_t>(e.id + 1, size.size() * 2), 0);
            cat.resize(size.size(), 0);
            part.resize(size.size(), 0);
        }
        if (e.kind == MemEvent::Alloc) {
            size[e.id] = CachingAllocatorModel::roundSize(e.bytes);
            cat[e.id] = static_cast<uint8_t>(e.category);
            part[e.id] = static_cast<uint8_t>(e.part);
            cur.bytes[cat[e.id]] += size[e.id];
            if (e.part == ModelPart::Vision)
                curVision.bytes[cat[e.id]] += size[e.id];
        } else if (e.kind == MemEvent::Free) {
            cur.bytes[cat[e.id]] -= size[e.id];
            if (part[e.id] == static_cast<uint8_t>(ModelPart::Vision))
                curVision.bytes[cat[e.id]] -= size[e.id];
            size[e.id] = 0;
        }
    }
    return out;
}

// The step's largest tensors each below 2^48 bytes (256 TiB): then every sum the simulator and
// the allocator model make of them stays far inside int64. Past it the configuration is no step a
// GPU runs, and it is refused naming what makes it so, never estimated through a wrapped product
// (issue 32, row 15: 2^40 tokens over a 2^24 vocabulary printed an estimate).
void requireRepresentable(const ModelArch &m, const TrainingConfig &c)
{
    constexpr int64_t kLimit = int64_t(1) << 48;
    auto check = [&](std::initializer_list<int64_t> factors, const char *what) {
        int64_t v = 1;
        for (int64_t f : factors)
            if (f > 0 && (__builtin_mul_overflow(v, f, &v) || v > kLimit))
                throw InputError("micro_batch x seq_len", std::to_string(c.microBatch) + " x " + std::to_string(c.seqLen),
                                 std::string(what) + " alone would pass 2^48 bytes (256 TiB): no GPU runs such a step");
    };
    check({c.microBatch, c.seqLen, m.vocabSize, 8}, "the logits (fp32, and their gradient)");
    check({c.microBatch, c.seqLen, std::max({m.hiddenSize, m.intermediateSize, m.expertIntermediateSize}), 16},
          "one layer's activations");
    if (c.attention == Attention::Eager)
        check({c.microBatch, m.numHeads, c.seqLen, c.seqLen, 4}, "eager attention's scores");
}

} // namespace

// The model class the step trains: the causal LM, or for reward modelling the same config as
// AutoModelForSequenceClassification with one label (See Note [Reward step]).
static ModelArch trainedModel(const ModelArch &model, const TrainingConfig &cfg)
{
    return cfg.mode == TrainingMode::Reward ? asSequenceClassifier(model, 1) : model;
}

Estimate estimate(const ModelArch &given, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    const ModelArch model = trainedModel(given, cfg);
    model.validate();
    cfg.validate();
    requireRepresentable(model, cfg);
    if (auto no = estimateRefusal(model, cfg))
        throw Refused(std::move(*no));
    // Simulated: one GPU, DDP, ZeRO-1 and FSDP2. Optimizer offload and QLoRA under FSDP still go
    // through the per-op ledger.
    if (!isSimulated(cfg) || opt.ledgerOnly)
        return estimateLedger(model, cfg, opt);

    Estimate est;
    const Ctx x(model, cfg);
    est.tokens = x.T;
    est.params = paramsPerRank(countParams(x), cfg);
    est.notes = stepNotes(x, est);
    // See Note [Repeated steady step] (docs/estimator.md).
    // A warm-up and two steady steps, as the engine measures: the allocator's cache can still
    // grow in the second (Qwen2.5-0.5B fp32 and Llama-3.2-1B with 8-bit AdamW: -6.6% and -5.5%
    // peak reserved with one). The second step is the first's events again (repeatLastStep: the
    // program is the same and the step frees all it allocates), so only the replay pays for it;
    // simulating it too made every estimate 1.5x slower.
    est.run = std::make_shared<const Timeline>(simulateMeasuredRun(model, cfg, opt));
    budgetFromRun(est, cfg, opt);
    return est;
}

namespace est {

// The run's replay through the allocator model, phase by phase, into the estimate's peaks and
// breakdowns, and what lives outside the allocator: one mechanism for a simulated run and a
// traced one (estimateFromTrace).
void budgetFromRun(Estimate &est, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    const Timeline &t = *est.run;
    AllocatorConfig ac = opt.allocator;
    ac.capacityBytes = INT64_MAX; // the estimate asks what the step needs, not whether it fits
    const Replay r = replay(t, ac);

    // Steady state: the phases of steps 1 and 2 (step 0 is the warm-up), as the probe reports.
    std::array<const ReplayPhase *, kPhaseCount> best{};
    int64_t reserved = 0;
    for (const auto &p : r.phases) {
        const size_t i = static_cast<size_t>(p.mark.phase);
        if (p.mark.phase == Phase::AfterLoad) {
            if (!best[i])
                best[i] = &p;
            continue;
        }
        if (p.mark.step < 1)
            continue;
        reserved = std::max(reserved, p.peakReservedBytes);
        if (!best[i] || p.peakAllocatedBytes > best[i]->peakAllocatedBytes)
            best[i] = &p;
    }
    std::vector<size_t> at;
    for (size_t i = 0; i < kPhaseCount; ++i) {
        size_t ev = 0;
        if (best[i] && i == 0) {
            // After load: the tensors alive at its end, where the first forward begins.
            // (breakdownsAt gives the state after the first N events.)
            ev = t.events.size();
            for (const TimelineMark &mk : t.marks)
                if (mk.event > best[i]->mark.event) {
                    ev = mk.event;
                    break;
                }
        } else if (best[i]) {
            ev = best[i]->peakEvents;
        }
        at.push_back(ev);
    }
    std::vector<Breakdown> vision;
    const std::vector<Breakdown> bd = breakdownsAt(t, at, vision);
    est.rollout.clear();
    for (size_t i = 0; i < kPhaseCount; ++i) {
        const Phase phase = static_cast<Phase>(i);
        if (i >= est.phases.size() && !best[i])
            continue; // a rollout phase this step does not have
        PhaseEstimate &pe = i < est.phases.size() ? est.phases[i] : est.rollout.emplace_back();
        pe.phase = phase;
        if (!best[i])
            continue;
        pe.peakAllocatedBytes = i == 0 ? best[i]->endAllocatedBytes : best[i]->peakAllocatedBytes;
        pe.peakReservedBytes = i == 0 ? best[i]->endReservedBytes : best[i]->peakReservedBytes;
        pe.atPeak = bd[i];
        pe.vision = vision[i];
        // Blocks the allocator did not split count whole in its allocated bytes: the rest of a
        // block beyond the tensor's rounded size is slack.
        pe.atPeak[Category::AllocatorSlack] = std::max<int64_t>(0, pe.peakAllocatedBytes - pe.atPeak.allocated());
    }
    takePeakPhase(est);
    est.peakReservedBytes = std::max(reserved, est.peakAllocatedBytes);
    // Slack: what the allocator holds beyond the tensors' rounded bytes (cached free blocks, and
    // remainders too small to split off).
    est.peak[Category::AllocatorSlack] = std::max<int64_t>(0, est.peakReservedBytes - est.peak.allocated());
    addOutsideAllocator(est, cfg, opt);
}

} // namespace est

Estimate estimateFromTrace(Timeline traced, const TrainingConfig &cfg, const EstimatorOptions &opt,
                           const ParamSummary &params, std::vector<std::string> notes)
{
    cfg.validate();
    if (traced.marks.empty() || traced.events.empty())
        throw InputError("timeline", traced.source.empty() ? std::string("(empty)") : traced.source,
                         "a traced run with no events or phases");
    bool steady = false;
    for (const TimelineMark &m : traced.marks)
        steady = steady || (m.step >= 1 && m.phase != Phase::AfterLoad);
    if (!steady)
        throw InputError("timeline", traced.source, "has no step after the warm-up to estimate from");
    // See Note [Repeated steady step] (docs/estimator.md): the trace runs one steady step.
    repeatLastStep(traced);
    Estimate est;
    est.tokens = checkedMul(cfg.microBatch, cfg.seqLen);
    est.params = params;
    est.notes = std::move(notes);
    est.run = std::make_shared<const Timeline>(std::move(traced));
    budgetFromRun(est, cfg, opt);
    return est;
}

Timeline estimateTimeline(const ModelArch &given, const TrainingConfig &cfg, const EstimatorOptions &opt,
                          int steadySteps)
{
    const ModelArch model = trainedModel(given, cfg);
    model.validate();
    cfg.validate();
    if (steadySteps < 1 || steadySteps > 8)
        throw InputError("steady_steps", std::to_string(steadySteps), "must be in [1, 8]");
    requireRepresentable(model, cfg);
    return simulateRun(model, cfg, opt, steadySteps);
}

} // namespace headroom
