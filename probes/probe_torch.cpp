// The probe's Torch side: a decoder that matches HF Transformers' Llama/Mistral/Qwen2 modeling
// op for op, PEFT's LoRA Linear, a bitsandbytes-style NF4 base for QLoRA, per-layer gradient
// checkpointing, the optimizers, and per-phase memory measurement.
//
// It is the only translation unit that includes Torch (each costs ~25 s to compile), built as the
// module headroom-probe-torch.so that the driver loads when a request needs it (torch_module.cpp). It builds
// against Debian's LibTorch 1.13 (CPU) and PyTorch's LibTorch 2.x (CUDA). Its parts are in
// libtorch/, by job: meter.h (the allocator's counters), network.h (the model and one step),
// optimizers.h, parallel.h (c10d, DDP); this file is the run itself. What it does with the
// numbers without Torch (the steady peak, its attribution) is core's (measurement.cpp).

#include "probe.h"

#include "headroom/budget.h"
#include "headroom/config.h"
#include "headroom/error.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/autocast_mode.h>
#include <c10/core/CPUAllocator.h>

#if HEADROOM_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include <torch/csrc/autograd/function_hook.h>
#if HEADROOM_HAVE_C10D
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#if HEADROOM_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if HEADROOM_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace headroom::probe {

namespace {

using torch::Tensor;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

#include "libtorch/meter.h"
#include "libtorch/network.h"
#include "libtorch/optimizers.h"
#include "libtorch/parallel.h"

bool isOomMessage(const std::string &msg)
{
    return msg.find("out of memory") != std::string::npos || msg.find("can't allocate memory") != std::string::npos ||
           msg.find("CUDA out of memory") != std::string::npos;
}

int64_t requestedFromMessage(const std::string &msg)
{
    // "Tried to allocate 2.00 GiB" (CUDA) or "you tried to allocate 123 bytes" (CPU)
    auto pos = msg.find("allocate ");
    if (pos == std::string::npos)
        return 0;
    double v = std::atof(msg.c_str() + pos + 9);
    if (msg.find("GiB", pos) != std::string::npos && msg.find("GiB", pos) < pos + 30)
        v *= 1073741824.0;
    else if (msg.find("MiB", pos) != std::string::npos && msg.find("MiB", pos) < pos + 30)
        v *= 1048576.0;
    return static_cast<int64_t>(v);
}

} // namespace

namespace {

bool cudaUsableHere()
{
#if HEADROOM_HAVE_CUDA
    return torch::cuda::is_available();
#else
    return false;
#endif
}

bool distributedHere(std::string *why)
{
#if HEADROOM_HAVE_C10D
    (void)why;
    return true;
#else
    if (why)
        *why = "this probe was built without c10d's Gloo or NCCL headers (Debian: libgloo-dev)";
    return false;
#endif
}

} // namespace

// The measurement's note, one sentence after another.
static void addNote(Measurement &M, const std::string &sentence)
{
    M.note += (M.note.empty() ? "" : " ") + sentence;
}

static Outcome runEngine(const ProbeRequest &request, const Callbacks &cb, const Dist &dist)
{
    Outcome out;
    const auto tStart = Clock::now();
    Measurement &M = out.measurement;
    M.model = request.model;
    M.config = request.config;
    M.headroomVersion = HEADROOM_VERSION;
    M.torchVersion = TORCH_VERSION;
    M.createdAt = nowIso();
    M.warmupSteps = 1;
    if (request.config.attention == Attention::Flash)
        addNote(M, "A flash kernel runs here as SDPA's flash kernel (the LibTorch engine cannot call flash-attn; the "
                   "transformers engine runs flash-attn where it is installed).");

    bool cuda = false;
#if HEADROOM_HAVE_CUDA
    cuda = request.device != "cpu" && torch::cuda::is_available();
#endif
    if (request.device == "cuda" && !cuda) {
        out.code = NoDevice;
        out.message = HEADROOM_HAVE_CUDA ? "no CUDA device is usable (driver missing or no GPU)"
                                         : "this probe was built without CUDA (Debian's LibTorch is CPU-only)";
        if (HEADROOM_HAVE_CUDA && dist.enabled) {
            const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
            out.message = "no CUDA device " + std::string(visible ? visible : "?") + " for this rank (one GPU per rank: " +
                          std::to_string(dist.worldSize) + " ranks need " + std::to_string(dist.worldSize) + " GPUs)";
        }
        return out;
    }
    M.device = cuda ? "cuda" : "cpu";
    if (!cuda) {
        cpuTracker();
        // Ranks share the machine's cores, as torchrun's OMP_NUM_THREADS does.
        at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, dist.worldSize)));
        M.deviceName = cpuName();
        addNote(M, "CPU mode: bytes counted by a tracking CPU allocator (oneDNN/BLAS workspaces bypass it). On CUDA "
                   "add PyTorch's cuBLAS workspace (64 MiB), the caching allocator's slack and the CUDA context; CPU "
                   "kernels keep no flash-attention layout, so attention and bf16 matmul temporaries differ.");
    }
#if HEADROOM_HAVE_CUDA
    if (cuda) {
        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, 0);
        M.deviceName = prop.name;
        int drv = 0;
        cudaDriverGetVersion(&drv);
        M.driver = "CUDA driver API " + std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
        cudaFree(nullptr); // create the context now, so its time is init time
    }
#endif
    // The early stop's trace, attached before the model is built (one GPU: a rank's collectives
    // run on NCCL's own streams, which the replay does not follow). Never destroyed: the allocator
    // keeps calling its tracker until the process ends (a static pointer keeps it reachable).
    static AllocatorTracer *const tracerStore = new AllocatorTracer;
    AllocatorTracer &tracer = *tracerStore;
    const int keptSteps = request.steps;
    bool earlyStop = cuda && request.earlyStop && !dist.enabled && request.steps > 1 && !cb.snapshot; // --snapshot samples the last step
    AllocatorConfig replayConf;
    if (earlyStop) {
        try {
            const char *conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
            replayConf = parseAllocConf(conf ? conf : "");
        } catch (const InputError &) {
            earlyStop = false; // a setting the model does not know: run every step
        }
        earlyStop = earlyStop && tracer.attach();
        if (!earlyStop)
            std::fprintf(stderr, "headroom-probe: early stop off: no allocator trace (allocator backend or settings)\n");
    }
    std::vector<TimelineMark> traceMarks;
    M.initSeconds = since(tStart);
    const torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
    const Meter meter(cuda);

    Phase current = Phase::Forward;
    int currentStep = 0;
    SnapshotRecorder recorder(meter, cuda);
    std::unique_ptr<Comm> comm;
    std::unique_ptr<DataParallel> dp;
    double parametersSum = 0;
    if (dist.enabled) {
        try {
            comm = std::make_unique<Comm>(dist, cuda);
        } catch (const std::exception &e) {
            out.code = Internal;
            out.message = "rank " + std::to_string(dist.rank) + ": cannot join the process group: " + e.what();
            return out;
        }
        M.backend = comm->backend;
        if (comm->size > 1) // at one rank HF (accelerate) does not wrap the model in DDP
            dp = std::make_unique<DataParallel>(*comm);
    }
    try {
        current = Phase::AfterLoad; // an OOM while building the model is an OOM "after load"
        const auto tBuild = Clock::now();
        torch::manual_seed(0); // every rank builds the same weights, as DDP's broadcast leaves them
        Net net(request.model, request.config, device, cb.stop);
        if (dp)
            dp->attach(net);
        if (dist.enabled)
            torch::manual_seed(1 + dist.rank); // and each rank reads its own batch
        const int64_t b = request.config.microBatch, s = request.config.seqLen;
        auto longOpts = torch::TensorOptions().dtype(torch::kLong).device(device);
        Step step{net, torch::randint(0, request.model.vocabSize, {b, s}, longOpts), {}, {}, {}};
        // ForCausalLMLoss: labels padded with ignore_index, shifted by one.
        step.labels = torch::constant_pad_nd(step.ids, {0, 1}, -100).slice(1, 1).contiguous().view({-1});
        meter.sync();
        M.buildSeconds = since(tBuild);
        {
            const Stats st = meter.read();
            PhaseMeasurement pm;
            pm.step = 0;
            pm.phase = Phase::AfterLoad;
            pm.peakAllocatedBytes = pm.allocatedBytes = st.allocated;
            pm.peakReservedBytes = pm.reservedBytes = st.reserved;
            std::tie(pm.deviceUsedBytes, pm.deviceTotalBytes) = meter.deviceUsedTotal();
            M.phases.push_back(pm);
        }

        OptimizerState opt;
        const auto tSteps = Clock::now();
        // One warm-up step: the real stack creates the optimizer state in its first step, in
        // blocks the activations just freed; made up front instead it moves peak reserved by up
        // to 22% (tests/data/h200/warmup-2026-12-01).
        const int total = M.warmupSteps + request.steps;
        Tensor loss;
        int64_t keptAfterForward = 0, beforeForward = 0;
        const std::array<Phase, 3> order = {Phase::Forward, Phase::Backward, Phase::Optimizer};
        for (int k = 0; k < total; ++k) {
            currentStep = k;
            for (size_t pi = 0; pi < order.size() + 1; ++pi) {
                if (cb.stop && cb.stop->load()) {
                    out.stopped = true;
                    return out;
                }
                const bool zeroGrad = pi == order.size();
                current = zeroGrad ? Phase::Optimizer : order[pi];
                if (cb.progress && !zeroGrad)
                    cb.progress(k, current, (k * 3.0 + double(pi)) / (total * 3.0));
                meter.sync();
                meter.resetPeak();
                if (!zeroGrad && tracer.on()) {
                    TimelineMark mk;
                    mk.step = k;
                    mk.phase = current;
                    mk.event = tracer.size();
                    traceMarks.push_back(mk);
                }
                const int64_t before = meter.read().allocated;
                const auto t0 = Clock::now();
                if (zeroGrad) {
                    for (auto &p : net.trainable)
                        p.mutable_grad() = Tensor();
                    continue; // zero_grad is not a phase of its own in the result
                }
                // --snapshot samples the last measured step; the markers allocate nothing.
                step.marker.recorder = cb.snapshot && k == total - 1 ? &recorder : nullptr;
                step.marker.stop = cb.stop;
                if (current == Phase::Forward) {
                    beforeForward = before;
                    loss = step.forward();
                } else if (current == Phase::Backward) {
                    loss.backward();
                    loss = Tensor();
                    // The layers' rotary tables and mask go with the step, as HF's forward locals
                    // do, not at the next forward: the step then frees all it made (the early stop
                    // replays only such a step).
                    step.calls.clear();
                    if (dp)
                        dp->afterBackward();
                } else {
                    optimizerStep(request.config, net.trainable, opt);
                }
                if (step.marker.recorder)
                    step.marker.recorder->sample(std::string("end of ") + std::string(toString(current)));
                meter.sync();
                const Stats st = meter.read();
                if (current == Phase::Forward)
                    keptAfterForward = st.allocated - beforeForward;
                PhaseMeasurement pm;
                pm.step = k;
                pm.phase = current;
                pm.peakAllocatedBytes = st.allocatedPeak;
                pm.peakReservedBytes = st.reservedPeak;
                pm.allocatedBytes = st.allocated;
                pm.reservedBytes = st.reserved;
                pm.allocRetries = st.retries;
                pm.ooms = st.ooms;
                pm.seconds = since(t0);
                std::tie(pm.deviceUsedBytes, pm.deviceTotalBytes) = meter.deviceUsedTotal();
                M.phases.push_back(pm);
            }
            // After a measured step, with more to run: does the next one repeat it? Only when the
            // allocator model reproduces every phase so far to the byte and its replay of the
            // step once more peaks where this one did (core: nextStepRepeats).
            if (earlyStop && k >= M.warmupSteps && k + 1 < total) {
                std::string why;
                std::optional<bool> repeats;
                try {
                    repeats = nextStepRepeats(timelineFromTrace(tracer.entries(), traceMarks), replayConf, M.phases, &why);
                } catch (const std::exception &e) {
                    why = e.what(); // the replay failed: measure every step
                }
                if (repeats && *repeats) {
                    M.skippedSteps = total - 1 - k;
                    for (int as = k + 1; as < total; ++as)
                        for (const PhaseMeasurement &r : repeatedStep(M.phases, k, as))
                            M.phases.push_back(r);
                    addNote(M, "Ran " + std::to_string(k + 1 - M.warmupSteps) + " of " + std::to_string(keptSteps) +
                                   " measured steps: this run's allocator trace, replayed through the caching-allocator "
                                   "model (exact on every phase run), shows the next step repeats the last; its phases "
                                   "are marked replayed.");
                    break;
                }
                if (!repeats) {
                    earlyStop = false; // the model cannot vouch for this run: run every step
                    std::fprintf(stderr, "headroom-probe: early stop off: %s\n", why.c_str());
                }
            }
        }
        if (const char *dump = std::getenv("HEADROOM_PROBE_TRACE"); dump && tracer.on()) {
            // For studying the allocator model: the run's allocator trace as a probe_timeline.
            std::ofstream(dump) << toJson(timelineFromTrace(tracer.entries(), traceMarks)).dump();
        }
        tracer.stop();
        M.stepsSeconds = since(tSteps);
        if (dist.enabled) { // the same on every rank when the collectives are right
            torch::NoGradGuard ng;
            double sum = 0;
            for (const auto &p : net.trainable)
                sum += p.detach().to(torch::kDouble).sum().item<double>();
            parametersSum = sum;
        }
        if (cb.progress)
            cb.progress(total - 1, Phase::Optimizer, 1.0);

        // Steady state and attribution (core: settleSteadyPeak, attributePeak).
        PeakAccounts acc;
        for (const auto &p : net.trainable)
            acc.gradientBytes += p.numel() * p.element_size();
        acc.weightBytes = net.weightBytes;
        acc.communicationBytes = dp ? dp->bucketBytes() : 0;
        acc.optimizerStateBytes = opt.bytes();
        acc.residentBytes = beforeForward; // weights + state + workspaces at the start of a step
        acc.keptAfterForwardBytes = keptAfterForward;
        acc.logprobBytes = b * s * request.model.vocabSize * 4;
        settleSteadyPeak(M);
        M.attribution = attributePeak(acc, M.peakAllocatedBytes, M.peakPhase);
        attributePhases(M, acc);
        if (cuda) {
            auto last = M.phases.back();
            M.cudaContextBytes = std::max<int64_t>(0, last.deviceUsedBytes - last.reservedBytes);
        }
        if (cb.snapshot) {
            int64_t lastStepPeak = 0;
            for (const auto &pm : M.phases)
                if (pm.step == total - 1)
                    lastStepPeak = std::max(lastStepPeak, pm.peakAllocatedBytes);
            out.snapshot = recorder.result(lastStepPeak);
        }
    } catch (const InputError &e) {
        out.code = BadRequest;
        out.message = e.what();
        return out;
    } catch (const StopRequested &) {
        out.stopped = true;
        return out;
    } catch (const c10::Error &e) {
        if (cb.stop && cb.stop->load()) { // the autograd engine rethrows MarkFn's StopRequested as c10::Error
            out.stopped = true;
            return out;
        }
        const std::string msg = e.what_without_backtrace();
        if (!isOomMessage(msg))
            throw std::runtime_error(msg);
        out.code = OutOfMemory;
        OomReport r;
        r.step = currentStep;
        r.phase = current;
        r.requestedBytes = requestedFromMessage(msg);
        // The tensors are gone by now (unwinding freed them), but the phase's peak counter still
        // holds what was in use when the failing request came.
        r.inUseBytes = meter.read().allocatedPeak;
        r.message = msg.substr(0, msg.find('\n'));
        M.oom = r;
        out.message = "out of memory in " + std::string(toString(current)) + " of step " + std::to_string(currentStep) +
                      " with " + formatGiB(r.inUseBytes) + " in use";
        const Stats st = meter.read();
        M.peakAllocatedBytes = st.allocatedPeak;
        M.peakReservedBytes = st.reservedPeak;
    }
    M.wallSeconds = since(tStart);
    if (dist.enabled) {
        RankPeak me = rankPeak(M, dist.rank);
        if (!M.oom)
            me.parametersSum = parametersSum;
        M.ranks = {me};
    }
    return out;
}

} // namespace headroom::probe

// The module's one export (probe.h: TorchEngine), looked up by the driver after dlopen.
extern "C" __attribute__((visibility("default"))) const headroom::probe::TorchEngine *headroom_probe_torch_engine()
{
    using namespace headroom::probe;
    static const TorchEngine engine{HEADROOM_VERSION, sizeof(Outcome), sizeof(headroom::ProbeRequest), &runEngine, &cudaUsableHere,
                                    &distributedHere};
    return &engine;
}
