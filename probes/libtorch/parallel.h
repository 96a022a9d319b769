// Part of probe_torch.cpp, the probe's one Torch translation unit (each costs ~25 s to compile):
// several ranks: c10d's Gloo or NCCL process group and DDP's buckets. Included there, inside namespace headroom::probe's anonymous namespace, in this order:
// meter.h, network.h, optimizers.h, parallel.h. Not a header of its own.
// NOLINTBEGIN(llvm-header-guard)

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
// which runs the real FSDP2 and ZeroRedundancyOptimizer; libtorchRefusal (headroom/support.h)). Reducer
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
// NOLINTEND(llvm-header-guard)
