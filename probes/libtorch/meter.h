// Part of probe_torch.cpp, the probe's one Torch translation unit (each costs ~25 s to compile):
// the meter: a tracking CPU allocator, the caching allocator's statistics, and --snapshot's samples. Included there, inside namespace headroom::probe's anonymous namespace, in this order:
// meter.h, network.h, optimizers.h, parallel.h. Not a header of its own.
// NOLINTBEGIN(llvm-header-guard)

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

// ---------------------------------------------------------------- allocator trace (early stop)
// Every allocation, completed free, segment cudaMalloc and release of PyTorch's caching
// allocator, from before the model is built, for the early stop (core's nextStepRepeats).
// attachAllocatorTraceTracker's callback runs under the allocator's lock on whichever thread
// allocates (autograd's too): it only appends. Not available (cudaMallocAsync backend, a LibTorch
// without the hook): empty, no stop.
class AllocatorTracer
{
public:
    bool attach()
    {
#if HEADROOM_HAVE_CUDA
        try {
            // The device allocators exist once CUDA is initialised for ATen; an empty tensor
            // initialises it and allocates nothing.
            (void)torch::empty({0}, torch::TensorOptions().device(torch::kCUDA));
            auto *allocator = c10::cuda::CUDACachingAllocator::get();
            if (!allocator || allocator->name() != "native")
                return false;
            {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_on = true;
            }
            allocator->attachAllocatorTraceTracker([this](const auto &te) {
                using Action = typename std::decay_t<decltype(te)>::Action;
                AllocatorTraceEntry e;
                if (te.action_ == Action::ALLOC)
                    e.kind = AllocatorTraceEntry::Alloc;
                else if (te.action_ == Action::FREE_COMPLETED)
                    e.kind = AllocatorTraceEntry::Free;
                else if (te.action_ == Action::SEGMENT_ALLOC)
                    e.kind = AllocatorTraceEntry::SegmentAlloc;
                else if (te.action_ == Action::SEGMENT_FREE)
                    e.kind = AllocatorTraceEntry::SegmentFree;
                else
                    return;
                e.address = static_cast<uint64_t>(te.addr_);
                e.bytes = static_cast<int64_t>(te.size_);
                std::lock_guard<std::mutex> lock(m_mutex);
                if (m_on)
                    m_entries.push_back(e);
            });
            return true;
        } catch (const std::exception &) {
            stop();
            return false;
        }
#else
        return false;
#endif
    }
    bool on() const
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_on;
    }
    size_t size() const
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_entries.size();
    }
    std::vector<AllocatorTraceEntry> entries() const
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_entries;
    }
    void stop()
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_on = false; // the tracker cannot be detached: it records nothing more
        m_entries.clear();
        m_entries.shrink_to_fit();
    }

private:
    mutable std::mutex m_mutex;
    std::vector<AllocatorTraceEntry> m_entries;
    bool m_on = false;
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
// NOLINTEND(llvm-header-guard)
