// The probe's Torch side: a decoder that matches HF Transformers' Llama/Mistral/Qwen2 modeling
// op for op, PEFT's LoRA Linear, a bitsandbytes-style NF4 base for QLoRA, per-layer gradient
// checkpointing, the optimizers, and per-phase memory measurement.
//
// It is the only translation unit that includes Torch (each costs ~25 s to compile). It builds
// against Debian's LibTorch 1.13 (CPU) and PyTorch's LibTorch 2.x (CUDA).

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

// ---------------------------------------------------------------- CPU tracking allocator
// Counts what LibTorch allocates on the CPU (oneDNN/BLAS workspaces bypass it).
class TrackingAllocator final : public c10::Allocator
{
public:
    explicit TrackingAllocator(c10::Allocator *base)
        : m_base(base)
    {
        s_self = this;
    }
#if TORCH_VERSION_MAJOR >= 2
    c10::DataPtr allocate(size_t n) override
#else
    c10::DataPtr allocate(size_t n) const override
#endif
    {
        c10::DataPtr inner = m_base->allocate(n);
        void *data = inner.get();
        const int64_t bytes = static_cast<int64_t>(n);
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_live.emplace(data, Entry{std::move(inner), bytes});
        }
        const int64_t cur = m_current.fetch_add(bytes) + bytes;
        int64_t peak = m_peak.load();
        while (cur > peak && !m_peak.compare_exchange_weak(peak, cur)) {
        }
        // Context == data, as Allocator::raw_allocate requires; the size lives in m_live.
        return {data, data, &TrackingAllocator::release, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::release; }
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 3 || TORCH_VERSION_MAJOR >= 3
    void copy_data(void *dest, const void *src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif
    int64_t current() const { return m_current.load(); }
    int64_t peak() const { return m_peak.load(); }
    std::vector<int64_t> liveBlockBytes() const
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        std::vector<int64_t> v;
        v.reserve(m_live.size());
        for (const auto &kv : m_live)
            v.push_back(kv.second.bytes);
        return v;
    }
    void resetPeak() { m_peak.store(m_current.load()); }

private:
    struct Entry
    {
        c10::DataPtr inner;
        int64_t bytes;
    };
    static void release(void *p)
    {
        if (!p || !s_self) // raw_deallocate(nullptr) happens
            return;
        c10::DataPtr inner;
        {
            std::lock_guard<std::mutex> lock(s_self->m_mutex);
            auto it = s_self->m_live.find(p);
            if (it == s_self->m_live.end())
                return;
            s_self->m_current.fetch_sub(it->second.bytes);
            inner = std::move(it->second.inner);
            s_self->m_live.erase(it);
        }
        // inner frees the memory as it goes out of scope, outside the lock
    }
    static inline TrackingAllocator *s_self = nullptr;
    c10::Allocator *m_base;
    mutable std::mutex m_mutex;
    mutable std::unordered_map<void *, Entry> m_live;
    mutable std::atomic<int64_t> m_current{0};
    mutable std::atomic<int64_t> m_peak{0};
};

TrackingAllocator *cpuTracker()
{
    static TrackingAllocator *tracker = [] {
        auto *t = new TrackingAllocator(c10::GetDefaultCPUAllocator());
        c10::SetCPUAllocator(t, /*priority=*/10);
        return t;
    }();
    return tracker;
}

// ---------------------------------------------------------------- allocator statistics
struct Stats
{
    int64_t allocated = 0, allocatedPeak = 0, reserved = 0, reservedPeak = 0, retries = 0, ooms = 0;
};

class Meter
{
public:
    explicit Meter(bool cuda)
        : m_cuda(cuda)
    {
    }
    void sync() const
    {
#if HEADROOM_HAVE_CUDA
        if (m_cuda)
            cudaDeviceSynchronize();
#endif
    }
    void resetPeak() const
    {
#if HEADROOM_HAVE_CUDA
        if (m_cuda) {
            c10::cuda::CUDACachingAllocator::resetPeakStats(0);
            return;
        }
#endif
        cpuTracker()->resetPeak();
    }
    Stats read() const
    {
        Stats s;
#if HEADROOM_HAVE_CUDA
        if (m_cuda) {
            const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
            s.allocated = st.allocated_bytes[0].current;
            s.allocatedPeak = st.allocated_bytes[0].peak;
            s.reserved = st.reserved_bytes[0].current;
            s.reservedPeak = st.reserved_bytes[0].peak;
            s.retries = st.num_alloc_retries;
            s.ooms = st.num_ooms;
            return s;
        }
#endif
        s.allocated = s.reserved = cpuTracker()->current();
        s.allocatedPeak = s.reservedPeak = cpuTracker()->peak();
        return s;
    }
    std::pair<int64_t, int64_t> deviceUsedTotal() const
    {
#if HEADROOM_HAVE_CUDA
        if (m_cuda) {
            size_t freeB = 0, totalB = 0;
            cudaMemGetInfo(&freeB, &totalB);
            return {int64_t(totalB - freeB), int64_t(totalB)};
        }
#endif
        return {0, 0};
    }

private:
    bool m_cuda;
};

// ---------------------------------------------------------------- --snapshot
// The allocator's live blocks at the sampled moment with the most bytes allocated. Samples are
// taken at every decoder-layer boundary in forward and in backward (MarkFn), and at the phase
// ends, so the chosen one is within one layer's transients of the true peak; the result says
// both numbers.
class SnapshotRecorder
{
public:
    SnapshotRecorder(const Meter &meter, bool cuda)
        : m_meter(meter)
        , m_cuda(cuda)
    {
    }
    void sample(const std::string &where)
    {
        m_meter.sync();
        const int64_t allocated = m_meter.read().allocated;
        if (allocated <= m_best)
            return;
        m_best = allocated;
        m_where = where;
        m_blocks = nlohmann::json::array();
        m_segments = nlohmann::json::array();
        std::vector<int64_t> sizes;
#if HEADROOM_HAVE_CUDA
        if (m_cuda) {
            const auto snap = c10::cuda::CUDACachingAllocator::snapshot();
            for (const auto &seg : snap.segments) {
                int64_t live = 0, count = 0;
                for (const auto &b : seg.blocks)
                    if (b.allocated) {
                        sizes.push_back(b.size);
                        live += b.size;
                        ++count;
                    }
                m_segments.push_back({{"total_bytes", seg.total_size},
                                      {"allocated_bytes", live},
                                      {"blocks", seg.blocks.size()},
                                      {"allocated_blocks", count},
                                      {"pool", seg.is_large ? "large" : "small"}});
            }
        }
#endif
        if (!m_cuda)
            sizes = cpuTracker()->liveBlockBytes();
        std::sort(sizes.rbegin(), sizes.rend());
        m_liveBlocks = static_cast<int64_t>(sizes.size());
        for (size_t i = 0; i < sizes.size() && i < 64; ++i)
            m_blocks.push_back(sizes[i]);
    }
    nlohmann::json result(int64_t stepPeak) const
    {
        return {{"schema_version", kSchemaVersion},
                {"kind", "probe_snapshot"},
                {"device", m_cuda ? "cuda" : "cpu"},
                {"taken_at", m_where},
                {"allocated_bytes", m_best},
                {"step_peak_allocated_bytes", stepPeak},
                {"live_blocks", m_liveBlocks},
                {"largest_block_bytes", m_blocks},
                {"segments", m_segments}};
    }

private:
    const Meter &m_meter;
    bool m_cuda;
    int64_t m_best = -1;
    int64_t m_liveBlocks = 0;
    std::string m_where;
    nlohmann::json m_blocks = nlohmann::json::array(), m_segments = nlohmann::json::array();
};

// SIGTERM/SIGINT between layers: a phase of a large model can take seconds, and the protocol
// promises a stop within one.
struct StopRequested : std::runtime_error
{
    StopRequested()
        : std::runtime_error("stopped")
    {
    }
};

// What MarkFn does at a layer boundary: sample for --snapshot, and honour a stop request.
struct LayerMarker
{
    SnapshotRecorder *recorder = nullptr;
    const std::atomic<bool> *stop = nullptr;
    void at(const std::string &where) const
    {
        if (stop && stop->load())
            throw StopRequested();
        if (recorder)
            recorder->sample(where);
    }
};

// Identity after each decoder layer; calls the marker on the way through, forward and backward.
// It allocates nothing (view_as), so measured peaks are the same with and without it.
struct MarkFn : public torch::autograd::Function<MarkFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, int64_t marker, int64_t layer)
    {
        ctx->saved_data["marker"] = marker;
        ctx->saved_data["layer"] = layer;
        reinterpret_cast<const LayerMarker *>(marker)->at("forward, after layer " + std::to_string(layer));
        return x.view_as(x);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        reinterpret_cast<const LayerMarker *>(ctx->saved_data["marker"].toInt())
            ->at("backward, into layer " + std::to_string(ctx->saved_data["layer"].toInt()));
        return {grads[0], Tensor(), Tensor()};
    }
};

// ---------------------------------------------------------------- fused loss
// A fused linear cross-entropy with the memory pattern of Liger's LigerFusedLinearCrossEntropy
// (liger_kernel/ops/fused_linear_cross_entropy.py, reduction "mean"): the forward makes the
// gradients chunk by chunk and keeps them; the logits never exist whole. Per chunk one
// [chunk, vocab] buffer holds the logits, then (in place, as Liger's Triton kernel writes it) the
// softmax gradient; grad_input takes a [chunk, hidden] product; grad_weight gets each chunk's
// [vocab, hidden] product through an fp32 copy. Without autocast (refused by
// protocol::libtorchRefusal).
struct FusedLossFn : public torch::autograd::Function<FusedLossFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, Tensor w, Tensor labels)
    {
        const int64_t hidden = w.size(1), vocab = w.size(0);
        Tensor in = x.reshape({-1, hidden});
        const int64_t tokens = in.size(0);
        Tensor gradInput = torch::zeros_like(in);
        Tensor gradWeight = w.requires_grad() ? torch::zeros_like(w) : Tensor();
        Tensor loss1d = torch::zeros({tokens}, in.options().dtype(torch::kFloat));
        Tensor valid = labels.ne(-100);
        const int64_t nonIgnored = std::max<int64_t>(1, valid.sum().item<int64_t>());
        const int64_t chunk = fusedLossChunkRows(tokens, hidden, vocab);
        for (int64_t start = 0; start < tokens; start += chunk) {
            const int64_t n = std::min(chunk, tokens - start);
            Tensor xc = in.narrow(0, start, n);
            Tensor target = labels.narrow(0, start, n);
            Tensor keep = valid.narrow(0, start, n).unsqueeze(1);
            Tensor idx = target.clamp_min(0).unsqueeze(1);
            Tensor logits = torch::mm(xc, w.t());
            {
                Tensor picked = logits.gather(1, idx).to(torch::kFloat);
                Tensor top = std::get<0>(logits.max(1, true));
                logits.sub_(top).exp_();
                Tensor sum = logits.sum(1, true, torch::kFloat);
                loss1d.narrow(0, start, n).copy_(((sum.log() + top.to(torch::kFloat) - picked) * keep).squeeze(1) / nonIgnored);
                logits.div_(sum.to(logits.scalar_type()));
                logits.scatter_add_(1, idx, torch::full({n, 1}, -1.0, logits.options()));
                logits.mul_(keep.to(logits.scalar_type())).div_(static_cast<double>(nonIgnored));
            }
            gradInput.narrow(0, start, n).copy_(torch::mm(logits, w));
            if (gradWeight.defined())
                // Liger (ead96b6) with a weight in the logits' dtype: grad_weight +=
                // torch.mm(grad_logits_chunk.t(), _input_chunk).float() (two [vocab, hidden]
                // temporaries per chunk; measured with the real library on the H200).
                gradWeight.add_(torch::mm(logits.t(), xc).to(torch::kFloat));
        }
        valid.reset();
        Tensor loss = loss1d.sum();
        ctx->save_for_backward({gradInput, gradWeight.defined() ? gradWeight : Tensor()});
        ctx->saved_data["shape"] = x.sizes().vec();
        return loss;
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        auto saved = ctx->get_saved_variables();
        Tensor gi = saved[0], gw = saved[1];
        if (!grads[0].equal(torch::ones({}, grads[0].options()))) { // element_mul in place
            gi.mul_(grads[0]);
            if (gw.defined())
                gw.mul_(grads[0]);
        }
        return {gi.view(ctx->saved_data["shape"].toIntVector()), gw, Tensor()};
    }
};

// ---------------------------------------------------------------- autocast
class AutocastGuard
{
public:
    AutocastGuard(bool enabled, c10::DeviceType dev, c10::ScalarType dtype)
        : m_enabled(enabled)
        , m_dev(dev)
    {
        if (!m_enabled)
            return;
#if TORCH_VERSION_MAJOR >= 2
        m_prev = at::autocast::is_autocast_enabled(dev);
        at::autocast::set_autocast_dtype(dev, dtype);
        at::autocast::set_autocast_enabled(dev, true);
#else
        if (dev == c10::DeviceType::CPU) {
            m_prev = at::autocast::is_cpu_enabled();
            at::autocast::set_autocast_cpu_dtype(dtype);
            at::autocast::set_cpu_enabled(true);
        } else {
            m_prev = at::autocast::is_enabled();
            at::autocast::set_autocast_gpu_dtype(dtype);
            at::autocast::set_enabled(true);
        }
#endif
        at::autocast::increment_nesting();
    }
    ~AutocastGuard()
    {
        if (!m_enabled)
            return;
        // torch.autocast.__exit__: the weight-cast cache lives until the outermost context exits.
        if (at::autocast::decrement_nesting() == 0)
            at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR >= 2
        at::autocast::set_autocast_enabled(m_dev, m_prev);
#else
        if (m_dev == c10::DeviceType::CPU)
            at::autocast::set_cpu_enabled(m_prev);
        else
            at::autocast::set_enabled(m_prev);
#endif
    }

private:
    bool m_enabled;
    c10::DeviceType m_dev;
    bool m_prev = false;
};

// ---------------------------------------------------------------- the model
constexpr float kNf4[16] = {-1.0f,       -0.6961928f, -0.5250731f, -0.3949175f, -0.2844414f, -0.1848449f,
                            -0.0910500f, 0.0f,        0.0795803f,  0.1609302f,  0.2461123f,  0.3379152f,
                            0.4407098f,  0.5626170f,  0.7229568f,  1.0f};

struct Linear
{
    int64_t in = 0, out = 0;
    Tensor weight, bias;
    // QLoRA: NF4 packed two per byte, absmax per 64 values (fp32, or uint8 + fp32 per 256 blocks).
    Tensor packed, absmax, absmax2;
    // LoRA (PEFT): fp32 adapters, as get_peft_model's autocast_adapter_dtype leaves them.
    Tensor loraA, loraB;
    double scaling = 1.0;
};

struct Mlp
{
    Linear gate, up, down;
};

struct Layer
{
    Tensor norm1, norm1b, norm2, norm2b, qNorm, kNorm;
    Linear q, k, v, o;
    Mlp mlp;
    Tensor router;
    std::vector<Mlp> experts;
    Mlp shared;
    Tensor sharedGate;
};

struct Net;
Tensor dequantNf4(const Linear &l, c10::ScalarType dtype, const Tensor &code);

// bitsandbytes MatMul4Bit: saves the packed weight only; dequantizes in forward and in backward.
struct Linear4bitFn : public torch::autograd::Function<Linear4bitFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, int64_t linearPtr, int64_t codePtr)
    {
        const auto *l = reinterpret_cast<const Linear *>(linearPtr);
        const auto *code = reinterpret_cast<const Tensor *>(codePtr);
        ctx->saved_data["l"] = linearPtr;
        ctx->saved_data["c"] = codePtr;
        ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
        Tensor w = dequantNf4(*l, x.scalar_type(), *code);
        return torch::linear(x, w);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        const auto *l = reinterpret_cast<const Linear *>(ctx->saved_data["l"].toInt());
        const auto *code = reinterpret_cast<const Tensor *>(ctx->saved_data["c"].toInt());
        const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
        Tensor w = dequantNf4(*l, dtype, *code);
        return {grads[0].matmul(w), Tensor(), Tensor()};
    }
};

Tensor dequantNf4(const Linear &l, c10::ScalarType dtype, const Tensor &code)
{
    const int64_t numel = l.in * l.out;
    Tensor hi = torch::div(l.packed, 16, "floor");
    Tensor lo = l.packed - hi * 16;
    Tensor idx = torch::stack({hi, lo}, -1).view({-1}).slice(0, 0, numel).to(torch::kInt);
    Tensor absmax = l.absmax;
    if (l.absmax2.defined()) // double quantization: 8-bit absmax scaled per 256 blocks
        absmax = (l.absmax.to(torch::kFloat) / 255.0f).view({-1}) *
                 l.absmax2.repeat_interleave(256).slice(0, 0, l.absmax.numel());
    const int64_t blocks = absmax.numel();
    Tensor vals = torch::index_select(code, 0, idx);
    Tensor padded = vals.numel() == blocks * 64 ? vals : torch::constant_pad_nd(vals, {0, blocks * 64 - numel});
    Tensor w = (padded.view({blocks, 64}) * absmax.view({blocks, 1})).view({-1}).slice(0, 0, numel);
    return w.view({l.out, l.in}).to(dtype);
}

struct Net
{
    const ModelArch &m;
    const TrainingConfig &c;
    torch::Device device;
    c10::ScalarType paramType, computeType;
    bool amp = false, full = true, qlora = false;
    Tensor embed, positions, finalNorm, finalNormB, lmHead, nf4Code;
    std::vector<Layer> layers;
    std::vector<Tensor> trainable;
    int64_t weightBytes = 0;
    std::array<bool, kLinearModuleCount> loraOn{};
    // SIGTERM during the build: a large model's random initialisation takes seconds on the CPU;
    // every parameter checks the flag, so a stop comes within one tensor's init.
    const std::atomic<bool> *stop = nullptr;
    Net(const ModelArch &model, const TrainingConfig &config, torch::Device dev, const std::atomic<bool> *stopFlag = nullptr)
        : m(model)
        , c(config)
        , device(dev)
        , stop(stopFlag)
    {
        amp = isAmp(c.precision);
        paramType = parameterBytes(c.precision) == 4 ? torch::kFloat
                    : c.precision == Precision::FP16  ? torch::kHalf
                                                      : torch::kBFloat16;
        computeType = c.precision == Precision::FP32                                     ? torch::kFloat
                      : (c.precision == Precision::FP16 || c.precision == Precision::AmpFP16) ? torch::kHalf
                                                                                         : torch::kBFloat16;
        full = c.finetune == FineTune::Full;
        qlora = c.finetune == FineTune::QLoRA;
        if (!full)
            loraOn = loraTargetMask(c.lora.targets);
        nf4Code = torch::from_blob(const_cast<float *>(kNf4), {16}, torch::kFloat).to(device);
        build();
    }

    Tensor param(std::vector<int64_t> shape, bool isNorm = false, bool trainableParam = true)
    {
        if (stop && stop->load())
            throw StopRequested();
        auto opts = torch::TensorOptions().dtype(paramType).device(device);
        Tensor t = isNorm ? torch::ones(shape, opts) : torch::empty(shape, opts);
        if (!isNorm) {
            // In slices of about 16 M elements, the flag checked between them: one embedding of a
            // 150k vocabulary takes seconds to fill on a CPU. Views: no extra memory.
            const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
            const int64_t perRow = rows > 0 ? t.numel() / rows : 1;
            const int64_t step = std::max<int64_t>(1, (int64_t(16) << 20) / std::max<int64_t>(1, perRow));
            if (t.dim() == 0)
                t.normal_(0.0, 0.02);
            for (int64_t r = 0; t.dim() > 0 && r < rows; r += step) {
                if (stop && stop->load())
                    throw StopRequested();
                t.narrow(0, r, std::min(step, rows - r)).normal_(0.0, 0.02);
            }
        }
        weightBytes += t.numel() * t.element_size();
        if (full && trainableParam) {
            t.requires_grad_(true);
            trainable.push_back(t);
        }
        return t;
    }

    Linear linear(int64_t in, int64_t out, bool bias, LinearModule module)
    {
        Linear l;
        l.in = in;
        l.out = out;
        if (qlora) {
            const int64_t numel = in * out;
            const int64_t blocks = (numel + 63) / 64;
            auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(device);
            l.packed = torch::randint(0, 256, {(numel + 1) / 2}, u8);
            if (c.lora.doubleQuant) {
                l.absmax = torch::randint(1, 256, {blocks}, u8);
                l.absmax2 = torch::rand({(blocks + 255) / 256}, torch::TensorOptions().device(device)) * 0.1 + 0.01;
            } else {
                l.absmax = torch::rand({blocks}, torch::TensorOptions().device(device)) * 0.1 + 0.01;
            }
            for (const Tensor &t : {l.packed, l.absmax, l.absmax2})
                if (t.defined())
                    weightBytes += t.numel() * t.element_size();
        } else {
            l.weight = param({out, in});
        }
        if (bias)
            l.bias = qlora ? param({out}, false, false) : param({out});
        if (!full && loraOn[static_cast<size_t>(module)]) {
            auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
            const int64_t r = c.lora.rank;
            l.loraA = torch::empty({r, in}, f32).uniform_(-1.0 / std::sqrt(double(in)), 1.0 / std::sqrt(double(in)));
            l.loraB = torch::zeros({out, r}, f32);
            for (Tensor *t : {&l.loraA, &l.loraB}) {
                t->requires_grad_(true);
                trainable.push_back(*t);
                weightBytes += t->numel() * t->element_size();
            }
            l.scaling = c.lora.alpha / double(r);
        }
        return l;
    }

    Mlp mlp(int64_t inter)
    {
        Mlp p;
        if (m.mlp == MlpKind::Gated)
            p.gate = linear(m.hiddenSize, inter, m.mlpBias, LinearModule::Gate);
        p.up = linear(m.hiddenSize, inter, m.mlpBias, LinearModule::Up);
        p.down = linear(inter, m.hiddenSize, m.mlpBias, LinearModule::Down);
        return p;
    }

    void build()
    {
        const int64_t h = m.hiddenSize, qOut = m.numHeads * m.headDim, kvOut = m.numKvHeads * m.headDim;
        const bool ln = m.norm == NormKind::LayerNorm;
        embed = param({m.vocabSize, h});
        if (m.learnedPositions)
            positions = param({m.maxPositions, h});
        layers.reserve(static_cast<size_t>(m.numLayers)); // onUnit keeps pointers into the layers
        for (int64_t i = 0; i < m.numLayers; ++i) {
            Layer L;
            L.norm1 = param({h}, true);
            L.norm2 = param({h}, true);
            if (ln) {
                L.norm1b = param({h}, false);
                L.norm2b = param({h}, false);
            }
            L.q = linear(h, qOut, m.qkvBias, LinearModule::Q);
            L.k = linear(h, kvOut, m.qkvBias, LinearModule::K);
            L.v = linear(h, kvOut, m.qkvBias, LinearModule::V);
            L.o = linear(qOut, h, m.oBias, LinearModule::O);
            if (m.qkNorm) {
                L.qNorm = param({m.headDim}, true);
                L.kNorm = param({m.headDim}, true);
            }
            if (m.isMoe()) {
                L.router = param({m.numExperts, h});
                for (int64_t e = 0; e < m.numExperts; ++e)
                    L.experts.push_back(mlp(m.expertIntermediateSize));
                if (m.sharedExpertIntermediateSize > 0)
                    L.shared = mlp(m.sharedExpertIntermediateSize);
                if (m.sharedExpertGate)
                    L.sharedGate = param({1, h});
            } else {
                L.mlp = mlp(m.intermediateSize);
            }
            layers.push_back(std::move(L));
        }
        finalNorm = param({h}, true);
        if (ln)
            finalNormB = param({h}, false);
        if (!m.tiedEmbeddings)
            lmHead = param({m.vocabSize, h});
    }

    // ---- ops, as HF writes them
    Tensor norm(const Tensor &x, const Tensor &w, const Tensor &b) const
    {
        if (m.norm == NormKind::LayerNorm)
            return torch::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
        // LlamaRMSNorm.forward
        const auto inputType = x.scalar_type();
        Tensor hs = x.to(torch::kFloat);
        Tensor variance = hs.pow(2).mean(-1, true);
        hs = hs * torch::rsqrt(variance + 1e-6);
        return w * hs.to(inputType);
    }

    Tensor applyLinear(const Linear &l, const Tensor &x) const
    {
        Tensor result;
        if (qlora) {
            result = Linear4bitFn::apply(x, reinterpret_cast<int64_t>(&l), reinterpret_cast<int64_t>(&nf4Code));
            if (l.bias.defined())
                result = result + l.bias;
        } else {
            result = torch::linear(x, l.weight, l.bias);
        }
        if (!l.loraA.defined())
            return result;
        // peft.tuners.lora.layer.Linear.forward
        const auto resultType = result.scalar_type();
        Tensor xa = x.to(l.loraA.scalar_type());
        if (c.lora.dropout > 0.0)
            xa = torch::dropout(xa, c.lora.dropout, true);
        result = result + torch::linear(torch::linear(xa, l.loraA), l.loraB) * l.scaling;
        return result.to(resultType);
    }

    Tensor act(const Tensor &x) const
    {
        if (m.activation == "silu")
            return torch::silu(x);
        if (m.activation == "gelu_new" || m.activation == "gelu_fast") // HF NewGELUActivation, as Python ops
            return 0.5 * x * (1.0 + torch::tanh(0.7978845608028654 /* sqrt(2 / pi) */ * (x + 0.044715 * torch::pow(x, 3.0))));
        if (m.activation == "gelu")
            return torch::gelu(x);
        return torch::gelu(x, "tanh");
    }

    Tensor applyMlp(const Mlp &p, const Tensor &x) const
    {
        if (m.mlp == MlpKind::Gated)
            return applyLinear(p.down, act(applyLinear(p.gate, x)) * applyLinear(p.up, x));
        return applyLinear(p.down, act(applyLinear(p.up, x)));
    }

    static Tensor rotateHalf(const Tensor &x)
    {
        const int64_t half = x.size(-1) / 2;
        return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
    }

    static Tensor repeatKv(const Tensor &x, int64_t rep)
    {
        if (rep == 1)
            return x;
        const auto b = x.size(0), kv = x.size(1), s = x.size(2), d = x.size(3);
        return x.unsqueeze(2).expand({b, kv, rep, s, d}).reshape({b, kv * rep, s, d});
    }

    Tensor attention(const Layer &L, const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &mask) const
    {
        const int64_t b = x.size(0), s = x.size(1), nh = m.numHeads, kv = m.numKvHeads, d = m.headDim;
        Tensor q = applyLinear(L.q, x).view({b, s, nh, d});
        Tensor k = applyLinear(L.k, x).view({b, s, kv, d});
        Tensor v = applyLinear(L.v, x).view({b, s, kv, d}).transpose(1, 2);
        if (m.qkNorm) {
            q = norm(q, L.qNorm, {});
            k = norm(k, L.kNorm, {});
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        // apply_rotary_pos_emb
        Tensor qe = (q * cos) + (rotateHalf(q) * sin);
        Tensor ke = (k * cos) + (rotateHalf(k) * sin);
        Tensor out;
        const double scaling = 1.0 / std::sqrt(double(d));
        if (c.attention == Attention::SDPA) {
#if TORCH_VERSION_MAJOR >= 2
            out = at::scaled_dot_product_attention(qe, ke, v, {}, 0.0, true, c10::nullopt, kv < nh);
#else
            out = std::get<0>(at::_scaled_dot_product_attention(qe, repeatKv(ke, nh / kv), repeatKv(v, nh / kv), {},
                                                                 0.0, false, true));
#endif
        } else {
            // eager_attention_forward
            Tensor kr = repeatKv(ke, nh / kv), vr = repeatKv(v, nh / kv);
            Tensor w = torch::matmul(qe, kr.transpose(2, 3)) * scaling;
            w = w + mask;
            w = torch::softmax(w, -1, torch::kFloat).to(qe.scalar_type());
            out = torch::matmul(w, vr);
        }
        out = out.transpose(1, 2).contiguous().reshape({b, s, nh * d});
        return applyLinear(L.o, out);
    }

    Tensor moe(const Layer &L, const Tensor &x) const
    {
        // MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock
        const auto shape = x.sizes().vec();
        Tensor hs = x.reshape({-1, m.hiddenSize});
        Tensor logits = torch::linear(hs, L.router);
        Tensor weights = torch::softmax(logits, 1, torch::kFloat);
        auto top = torch::topk(weights, m.expertsPerToken, -1);
        Tensor rw = std::get<0>(top);
        rw = (rw / rw.sum(-1, true)).to(hs.scalar_type());
        Tensor sel = std::get<1>(top);
        Tensor outAcc = torch::zeros_like(hs);
        for (int64_t e = 0; e < m.numExperts; ++e) {
            Tensor hit = (sel == e).nonzero();
            if (hit.size(0) == 0)
                continue;
            Tensor rows = hit.select(1, 0), slot = hit.select(1, 1);
            Tensor cur = hs.index_select(0, rows);
            Tensor y = applyMlp(L.experts[static_cast<size_t>(e)], cur) * rw.index({rows, slot}).unsqueeze(1);
            outAcc = outAcc.index_add(0, rows, y.to(outAcc.scalar_type()));
        }
        if (L.shared.down.in > 0) {
            Tensor so = applyMlp(L.shared, hs);
            if (L.sharedGate.defined())
                so = torch::sigmoid(torch::linear(hs, L.sharedGate)) * so;
            outAcc = outAcc + so;
        }
        return outAcc.view(shape);
    }

    Tensor layerForward(size_t i, const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &mask) const
    {
        const Layer &L = layers[i];
        Tensor h = x + attention(L, norm(x, L.norm1, L.norm1b), cos, sin, mask);
        Tensor n2 = norm(h, L.norm2, L.norm2b);
        return h + (m.isMoe() ? moe(L, n2) : applyMlp(L.mlp, n2));
    }
};

struct LayerCall
{
    const Net *net;
    size_t index;
    Tensor cos, sin, mask;
};

// Gradient checkpointing per decoder layer: keeps only the layer input, recomputes in backward.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, int64_t callPtr)
    {
        ctx->save_for_backward({x});
        ctx->saved_data["call"] = callPtr;
        const auto *call = reinterpret_cast<const LayerCall *>(callPtr);
        torch::NoGradGuard noGrad;
        return call->net->layerForward(call->index, x, call->cos, call->sin, call->mask);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        const auto *call = reinterpret_cast<const LayerCall *>(ctx->saved_data["call"].toInt());
        Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
        Tensor out;
        {
            torch::AutoGradMode on(true);
            AutocastGuard ac(call->net->amp, call->net->device.type(), call->net->computeType);
            out = call->net->layerForward(call->index, x, call->cos, call->sin, call->mask);
        }
        torch::autograd::backward({out}, {grads[0]});
        return {x.grad(), Tensor()};
    }
};

// ---------------------------------------------------------------- the step

struct Step
{
    Net &net;
    Tensor ids, labels;
    std::vector<LayerCall> calls;
    LayerMarker marker; // its recorder is set for the step that --snapshot samples

    Tensor forward()
    {
        const auto &m = net.m;
        const int64_t b = ids.size(0), s = ids.size(1);
        AutocastGuard ac(net.amp, net.device.type(), net.computeType);
        Tensor x = torch::embedding(net.embed, ids);
        if (net.positions.defined())
            x = x + torch::embedding(net.positions, torch::arange(s, ids.options()).unsqueeze(0));
        if (net.c.gradCheckpointing && !x.requires_grad())
            x.requires_grad_(true); // HF enable_input_require_grads, needed by reentrant checkpointing
        // LlamaRotaryEmbedding: fp32 with autocast off, then cast to the hidden dtype.
        Tensor cos, sin;
        {
            AutocastGuard off(false, net.device.type(), net.computeType);
            auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(net.device);
            Tensor invFreq = 1.0 / torch::pow(10000.0, torch::arange(0, m.headDim, 2, f32) / double(m.headDim));
            Tensor pos = torch::arange(s, f32);
            Tensor freqs = torch::outer(pos, invFreq);
            Tensor emb = torch::cat({freqs, freqs}, -1);
            cos = emb.cos().to(x.scalar_type()).unsqueeze(0).unsqueeze(0);
            sin = emb.sin().to(x.scalar_type()).unsqueeze(0).unsqueeze(0);
        }
        Tensor mask;
        if (net.c.attention == Attention::Eager) { // (b, 1, s, s) additive causal mask, as HF builds it
            auto o = torch::TensorOptions().dtype(net.computeType).device(net.device);
            mask = torch::full({s, s}, -1e4, o).triu(1).expand({b, 1, s, s}).contiguous();
        }
        calls.clear();
        calls.reserve(net.layers.size());
        for (size_t i = 0; i < net.layers.size(); ++i) {
            calls.push_back({&net, i, cos, sin, mask});
            if (net.c.gradCheckpointing)
                x = CheckpointFn::apply(x, reinterpret_cast<int64_t>(&calls.back()));
            else
                x = net.layerForward(i, x, cos, sin, mask);
            if (x.requires_grad() && (marker.recorder || marker.stop))
                x = MarkFn::apply(x, reinterpret_cast<int64_t>(&marker), static_cast<int64_t>(i));
            else
                marker.at("forward, after layer " + std::to_string(i));
        }
        x = net.norm(x, net.finalNorm, net.finalNormB);
        if (net.c.loss == Loss::Fused)
            return FusedLossFn::apply(x, net.lmHead.defined() ? net.lmHead : net.embed, labels);
        Tensor logits = torch::linear(x, net.lmHead.defined() ? net.lmHead : net.embed);
        if (m.finalLogitSoftcap > 0)
            logits = torch::tanh(logits / m.finalLogitSoftcap) * m.finalLogitSoftcap;
        // ForCausalLMLoss
        Tensor flat = logits.to(torch::kFloat).view({-1, m.vocabSize});
        return torch::nn::functional::cross_entropy(flat, labels,
                                                    torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    }
};

// ---------------------------------------------------------------- optimizers
struct OptimizerState
{
    std::vector<Tensor> a, b; // exp_avg / exp_avg_sq, momentum, row/col variances, 8-bit state
    std::vector<Tensor> aMax, bMax; // 8-bit absmax
    std::vector<Tensor> steps;
    int64_t step = 0;
    bool created = false;

    int64_t bytes() const
    {
        int64_t n = 0;
        for (const auto *v : {&a, &b, &aMax, &bMax, &steps})
            for (const auto &t : *v)
                if (t.defined())
                    n += t.numel() * t.element_size();
        return n;
    }
};

std::vector<Tensor> grads(const std::vector<Tensor> &params)
{
    std::vector<Tensor> g;
    g.reserve(params.size());
    for (const auto &p : params)
        g.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
    return g;
}

// The optimizer's state as its first step creates it (_init_group): zeros of each parameter's
// shape, or of the factored/8-bit shapes. SGD keeps none.
void createState(const TrainingConfig &c, const std::vector<Tensor> &params, OptimizerState &st)
{
    torch::NoGradGuard noGrad;
    switch (c.optimizer) {
    case Optimizer::AdamW:
        for (const auto &p : params) {
            st.a.push_back(torch::zeros_like(p));
            st.b.push_back(torch::zeros_like(p));
            st.steps.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(p.device())));
        }
        break;
    case Optimizer::SGD:
        break;
    case Optimizer::SGDMomentum: // momentum_buffer = clone(grad) on the first step
    case Optimizer::Lion:
        for (const auto &p : params)
            st.a.push_back(torch::zeros_like(p));
        break;
    case Optimizer::Adafactor: // torch.optim.Adafactor: factored second moments for matrices
        for (const auto &p : params) {
            if (p.dim() >= 2) {
                st.a.push_back(torch::zeros({p.size(0)}, p.options()));
                st.b.push_back(torch::zeros({p.size(1)}, p.options()));
            } else {
                st.a.push_back(torch::zeros_like(p));
                st.b.push_back(Tensor());
            }
        }
        break;
    case Optimizer::AdamW8bit:
        // bitsandbytes blockwise 8-bit state: uint8 moments with an fp32 absmax per 256 values;
        // tensors under 4096 values keep fp32 state.
        for (const auto &p : params) {
            if (p.numel() >= 4096) {
                const int64_t blocks = (p.numel() + 255) / 256;
                auto u8 = p.options().dtype(torch::kUInt8);
                auto f32 = p.options().dtype(torch::kFloat);
                st.a.push_back(torch::zeros({p.numel()}, u8));
                st.b.push_back(torch::zeros({p.numel()}, u8));
                st.aMax.push_back(torch::zeros({blocks}, f32));
                st.bMax.push_back(torch::zeros({blocks}, f32));
            } else {
                st.a.push_back(torch::zeros_like(p, p.options().dtype(torch::kFloat)));
                st.b.push_back(torch::zeros_like(p, p.options().dtype(torch::kFloat)));
                st.aMax.push_back(Tensor());
                st.bMax.push_back(Tensor());
            }
        }
        break;
    }
    st.created = true;
}

void optimizerStep(const TrainingConfig &c, std::vector<Tensor> &params, OptimizerState &st)
{
    torch::NoGradGuard noGrad;
    const double lr = 1e-5, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
    ++st.step;
    std::vector<Tensor> g = grads(params);
    const bool first = !st.created;
    if (first && c.optimizer == Optimizer::SGDMomentum) {
        for (const auto &x : g)
            st.a.push_back(x.clone());
        st.created = true;
    } else if (first) {
        createState(c, params, st);
    }
    switch (c.optimizer) {
    case Optimizer::AdamW: {
        const double bc1 = 1 - std::pow(beta1, double(st.step)), bc2 = 1 - std::pow(beta2, double(st.step));
        const double stepSize = lr / bc1, bc2Sqrt = std::sqrt(bc2);
        if (c.optimizerImpl == OptimizerImpl::Fused) {
#if TORCH_VERSION_MAJOR >= 2
            if (!params.empty() && params.front().is_cuda()) {
                for (auto &s : st.steps)
                    s.add_(1);
                at::_fused_adamw_(params, g, st.a, st.b, {}, st.steps, lr, beta1, beta2, wd, eps, false, false);
                break;
            }
#endif
        }
        if (c.optimizerImpl == OptimizerImpl::ForLoop || c.optimizerImpl == OptimizerImpl::Fused) {
            // torch.optim.adamw._single_tensor_adamw
            for (size_t i = 0; i < params.size(); ++i) {
                params[i].mul_(1 - lr * wd);
                st.a[i].mul_(beta1).add_(g[i], 1 - beta1);
                st.b[i].mul_(beta2).addcmul_(g[i], g[i], 1 - beta2);
                Tensor denom = (st.b[i].sqrt() / bc2Sqrt).add_(eps);
                params[i].addcdiv_(st.a[i], denom, -stepSize);
            }
            break;
        }
        // torch.optim.adam._multi_tensor_adam (decoupled weight decay)
        torch::_foreach_mul_(params, 1 - lr * wd);
        torch::_foreach_mul_(st.a, beta1);
        torch::_foreach_add_(st.a, g, 1 - beta1);
        torch::_foreach_mul_(st.b, beta2);
        torch::_foreach_addcmul_(st.b, g, g, 1 - beta2);
        std::vector<Tensor> denom = torch::_foreach_sqrt(st.b);
        torch::_foreach_div_(denom, bc2Sqrt);
        torch::_foreach_add_(denom, eps);
        torch::_foreach_addcdiv_(params, st.a, denom, -stepSize);
        break;
    }
    case Optimizer::SGD:
        torch::_foreach_add_(params, g, -lr);
        break;
    case Optimizer::SGDMomentum:
        if (!first) {
            torch::_foreach_mul_(st.a, 0.9);
            torch::_foreach_add_(st.a, g, 1.0);
        }
        torch::_foreach_add_(params, st.a, -lr);
        break;
    case Optimizer::Lion: {
        std::vector<Tensor> u = torch::_foreach_mul(st.a, beta1);
        torch::_foreach_add_(u, g, 1 - beta1);
        for (auto &t : u)
            t.sign_();
        torch::_foreach_add_(params, u, -lr);
        torch::_foreach_mul_(st.a, beta2);
        torch::_foreach_add_(st.a, g, 1 - beta2);
        break;
    }
    case Optimizer::Adafactor: {
        std::vector<Tensor> sq = torch::_foreach_mul(g, g);
        const double decay = 1 - std::pow(double(st.step), -0.8);
        for (size_t i = 0; i < params.size(); ++i) {
            if (params[i].dim() >= 2) {
                st.a[i].lerp_(sq[i].mean(-1), 1 - decay);
                st.b[i].lerp_(sq[i].mean(-2), 1 - decay);
            } else {
                st.a[i].lerp_(sq[i], 1 - decay);
            }
        }
        sq.clear();
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor var = params[i].dim() >= 2 ? torch::outer(st.a[i], st.b[i]) / st.a[i].mean().clamp_min(1e-30)
                                              : st.a[i];
            params[i].add_(g[i] * var.clamp_min(1e-30).rsqrt(), -1e-2);
        }
        break;
    }
    case Optimizer::AdamW8bit: {
        // The update runs through fp32 per tensor.
        const double bc1 = 1 - std::pow(beta1, double(st.step)), bc2 = 1 - std::pow(beta2, double(st.step));
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor gf = g[i].to(torch::kFloat).view({-1});
            Tensor ea, eb;
            if (st.aMax[i].defined()) {
                ea = (st.a[i].to(torch::kFloat) / 127.5 - 1).view({-1});
                eb = (st.b[i].to(torch::kFloat) / 255.0).view({-1});
                ea = ea.mul_(beta1).add_(gf, 1 - beta1);
                eb = eb.mul_(beta2).addcmul_(gf, gf, 1 - beta2);
                Tensor upd = (ea / bc1) / ((eb / bc2).sqrt_().add_(eps));
                params[i].view({-1}).add_(upd.to(params[i].scalar_type()), -lr);
                st.a[i].copy_(((ea.clamp(-1, 1) + 1) * 127.5).to(torch::kUInt8));
                st.b[i].copy_((eb.clamp(0, 1) * 255.0).to(torch::kUInt8));
            } else {
                st.a[i].mul_(beta1).add_(g[i].to(torch::kFloat), 1 - beta1);
                st.b[i].mul_(beta2).addcmul_(g[i].to(torch::kFloat), g[i].to(torch::kFloat), 1 - beta2);
            }
        }
        break;
    }
    }
}

// ---------------------------------------------------------------- several ranks
// The collectives of one rank, over c10d: Gloo on the CPU, NCCL on CUDA (the engines PyTorch's
// DDP and FSDP use). Every call waits for its result, so phases end with their traffic done.
#if HEADROOM_HAVE_C10D
#if TORCH_VERSION_MAJOR >= 2
using PgBase = c10d::Backend;
#else
using PgBase = c10d::ProcessGroup;
#endif
#endif

class Comm
{
public:
    int rank = 0, size = 1;
    std::string backend;

    Comm(const Dist &d, bool cuda)
        : rank(d.rank)
        , size(d.worldSize)
    {
#if HEADROOM_HAVE_C10D
        // Rank 0 serves the store on a port the OS picks and announces it; the launcher starts the
        // other ranks only then, so no other process can take the port in between. The process
        // group's own rendezvous (through the store) waits for every rank.
        c10d::TCPStoreOptions so;
        so.port = static_cast<std::uint16_t>(d.port);
        so.isServer = d.rank == 0;
        so.numWorkers = static_cast<size_t>(d.worldSize);
        so.waitWorkers = false;
        so.timeout = std::chrono::seconds(120);
        auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
        if (d.rank == 0 && d.announce)
            d.announce(store->getPort());
        if (cuda) {
#if HEADROOM_HAVE_NCCL
            backend = "nccl";
            auto o = c10d::ProcessGroupNCCL::Options::create();
            m_pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
#else
            throw std::runtime_error("this probe was built without NCCL; several CUDA ranks need it");
#endif
        } else {
#if HEADROOM_HAVE_GLOO
            backend = "gloo";
            auto o = c10d::ProcessGroupGloo::Options::create();
            o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
            o->timeout = std::chrono::seconds(120);
            m_pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
#else
            throw std::runtime_error("this probe was built without Gloo; several CPU ranks need it");
#endif
        }
        // Kept until the process exits, as a torchrun worker keeps its group: tearing down NCCL
        // communicators while a peer may still be finishing is what hangs at exit.
        m_keep = new c10::intrusive_ptr<PgBase>(m_pg);
#else
        (void)cuda;
        throw std::runtime_error("this probe was built without c10d (Gloo or NCCL); several ranks need it");
#endif
    }

    void allreduce(const Tensor &t)
    {
#if HEADROOM_HAVE_C10D
        std::vector<Tensor> v{t};
        finish(m_pg->allreduce(v));
#endif
    }

private:
#if HEADROOM_HAVE_C10D
    // Wait, then let the backend's worker drop its reference to the work (and to the tensors and
    // staging buffers it holds) before going on: otherwise their bytes are freed a moment later,
    // on another thread, and land in whichever phase is measured next.
    static void finish(const c10::intrusive_ptr<c10d::Work> &w)
    {
        w->wait();
        const auto until = Clock::now() + std::chrono::seconds(1);
        while (w.use_count() > 1 && Clock::now() < until)
            std::this_thread::yield();
    }
    c10::intrusive_ptr<PgBase> m_pg;
    c10::intrusive_ptr<PgBase> *m_keep = nullptr;
#endif
};

// DDP's bucket_cap_mb = 25 (the estimator's default), and its first bucket's 1 MiB.
const int64_t kBucketBytes = EstimatorOptions{}.ddpBucketBytes;
const int64_t kFirstBucketBytes = int64_t(1) << 20;

// Data parallelism of one rank: DDP (ZeRO and FSDP are measured by the transformers engine,
// which runs the real FSDP2 and ZeroRedundancyOptimizer; protocol::libtorchRefusal). Reducer
// buckets (25 MiB, reverse parameter order) hold a copy of every gradient for the whole run
// (gradient_as_bucket_view=False); after backward each bucket is all-reduced and copied back.
class DataParallel final
{
public:
    explicit DataParallel(Comm &comm)
        : m_comm(comm)
    {
    }

    // After the model is built: Reducer::initialize_buckets, reverse order, a new bucket when
    // the cap (1 MiB for the first, 25 MiB after) is passed or the dtype changes.
    void attach(Net &net)
    {
        m_params = net.trainable;
        int64_t bytes = 0;
        bool first = true;
        std::vector<size_t> members;
        auto close = [&] {
            if (members.empty())
                return;
            int64_t numel = 0;
            for (size_t i : members)
                numel += m_params[i].numel();
            m_buckets.push_back({torch::empty({numel}, m_params[members.front()].options().requires_grad(false)),
                                 members});
            members.clear();
            bytes = 0;
            first = false;
        };
        for (size_t k = m_params.size(); k-- > 0;) {
            if (!members.empty() && m_params[k].scalar_type() != m_params[members.front()].scalar_type())
                close();
            members.push_back(k);
            bytes += m_params[k].numel() * m_params[k].element_size();
            if (bytes >= (first ? kFirstBucketBytes : kBucketBytes))
                close();
        }
        close();
    }

    // After loss.backward(): mark_variable_ready copies each gradient in, the bucket is
    // all-reduced and averaged, finalize_bucket_dense copies it back.
    void afterBackward()
    {
        torch::NoGradGuard ng;
        for (auto &b : m_buckets) {
            int64_t o = 0;
            for (size_t i : b.members) {
                const int64_t n = m_params[i].numel();
                b.flat.narrow(0, o, n).copy_(gradOrZeros(m_params[i]).view({-1}));
                o += n;
            }
            m_comm.allreduce(b.flat);
            b.flat.div_(m_comm.size);
            o = 0;
            for (size_t i : b.members) {
                const int64_t n = m_params[i].numel();
                m_params[i].mutable_grad().view({-1}).copy_(b.flat.narrow(0, o, n));
                o += n;
            }
        }
    }

    // The buckets, resident from the start.
    int64_t bucketBytes() const
    {
        int64_t n = 0;
        for (const auto &b : m_buckets)
            n += b.flat.numel() * b.flat.element_size();
        return n;
    }
private:
    struct Bucket
    {
        Tensor flat;
        std::vector<size_t> members;
    };
    // A parameter that got no gradient takes part in the reduction with zeros, as DDP's bucket does.
    static const Tensor &gradOrZeros(Tensor &p)
    {
        if (!p.grad().defined())
            p.mutable_grad() = torch::zeros_like(p);
        return p.grad();
    }

    Comm &m_comm;
    std::vector<Tensor> m_params;
    std::vector<Bucket> m_buckets;
};

std::string nowIso()
{
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

std::string cpuName()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            auto p = line.find(':');
            return p == std::string::npos ? line : line.substr(p + 2);
        }
    return "CPU";
}

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

bool libtorchAvailable()
{
    return true;
}

bool distributedAvailable(std::string *why)
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

Outcome run(const ProbeRequest &request, const Callbacks &cb, const Dist &dist)
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
        M.note = "CPU mode: bytes counted by a tracking CPU allocator (oneDNN/BLAS workspaces bypass it). On CUDA "
                 "add PyTorch's cuBLAS workspace (64 MiB), the caching allocator's slack and the CUDA context; CPU "
                 "kernels keep no flash-attention layout, so attention and bf16 matmul temporaries differ.";
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
        }
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

        // Steady state and attribution.
        int64_t gradBytes = 0;
        for (const auto &p : net.trainable)
            gradBytes += p.numel() * p.element_size();
        const int64_t stateBytes = opt.bytes();
        for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
            auto sp = M.steady(p);
            if (sp && sp->peakAllocatedBytes >= M.peakAllocatedBytes) {
                M.peakAllocatedBytes = sp->peakAllocatedBytes;
                M.peakPhase = p;
            }
            if (sp)
                M.peakReservedBytes = std::max(M.peakReservedBytes, sp->peakReservedBytes);
        }
        const int64_t logprobs = b * s * request.model.vocabSize * 4;
        Breakdown &A = M.attribution;
        A[Category::Weights] = net.weightBytes;
        if (dp)
            A[Category::Communication] = dp->bucketBytes(); // DDP's Reducer buckets, resident
        A[Category::OptimizerState] = stateBytes;
        const int64_t resident = beforeForward; // weights + state + workspaces at the start of a step
        const int64_t acts = std::max<int64_t>(0, keptAfterForward - logprobs);
        if (M.peakPhase == Phase::Optimizer) {
            A[Category::Gradients] = gradBytes;
        } else if (M.peakPhase == Phase::Backward && M.peakAllocatedBytes - resident <= gradBytes + acts / 4) {
            A[Category::Gradients] = gradBytes; // the peak came at the end of backward
        } else {
            A[Category::Activations] = acts;
            A[Category::Logits] = std::max<int64_t>(0, M.peakAllocatedBytes - resident - acts);
        }
        int64_t named = 0;
        for (Category cat : {Category::Weights, Category::OptimizerState, Category::Gradients, Category::Activations,
                             Category::Logits, Category::Communication})
            named += A[cat];
        A[Category::Temporaries] = std::max<int64_t>(0, M.peakAllocatedBytes - named);
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
