// Loads the LibTorch engine (headroom-probe-torch.so, probe_torch.cpp) when a request needs it, and
// creates the CUDA context while it loads. Torch-free: this file builds without LibTorch.
//
// Why a module: Torch's and CUDA's libraries take about a third of a second to load and the CUDA
// context about a quarter (H200, docs/performance.md). Linked into the executable, they load before
// main and the context follows them; loaded here, the context is made by the driver API on another
// thread at the same time (the CUDA runtime adopts the device's primary context it finds), and
// `--help`, refused requests and the transformers engine never load Torch at all.

#include "probe.h"

#include "headroom/config.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace headroom::probe {

namespace {

struct Loaded
{
    const TorchEngine *engine = nullptr;
    std::string why; // when engine is null
};

// Joined before the module's code runs, or at exit (a request refused while the context was being
// made): never left running into the driver's own teardown.
struct CudaThread
{
    std::thread t;
    ~CudaThread()
    {
        if (t.joinable())
            t.join();
    }
};
std::thread &cudaThread()
{
    static CudaThread t;
    return t.t;
}

using Clock = std::chrono::steady_clock;
struct Startup
{
    std::promise<void> driverReady; // cuInit has returned (or there is no driver)
    std::future<void> ready = driverReady.get_future();
    Clock::time_point t0 = Clock::now(), init, context, loadStart, loadEnd;
};
Startup &startup()
{
    static Startup s;
    return s;
}

Loaded load()
{
    Loaded r;
    const std::string dir = selfDir();
    // Next to the executable (the build tree), then where the package installs it.
    const std::vector<std::string> candidates = {dir + "/headroom-probe-torch.so",
                                                 dir + "/../" HEADROOM_PROBE_MODULE_DIR "/headroom-probe-torch.so"};
    std::string tried;
    for (const std::string &path : candidates) {
        tried += (tried.empty() ? "" : " or ") + path;
        if (::access(path.c_str(), F_OK) != 0)
            continue;
        void *h = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
        if (!h) {
            const char *e = ::dlerror();
            r.why = "the LibTorch engine (" + path + ") cannot be loaded: " + (e ? e : "dlopen failed");
            return r;
        }
        using Entry = const TorchEngine *(*)();
        auto entry = reinterpret_cast<Entry>(::dlsym(h, "headroom_probe_torch_engine"));
        const TorchEngine *e = entry ? entry() : nullptr;
        if (!e || std::strcmp(e->version, HEADROOM_VERSION) != 0 || e->outcomeBytes != sizeof(Outcome) ||
            e->requestBytes != sizeof(ProbeRequest)) {
            r.why = "the LibTorch engine (" + path + ") is not from this build of headroom-probe " HEADROOM_VERSION;
            return r;
        }
        r.engine = e;
        return r;
    }
    r.why = "this headroom-probe has no LibTorch engine (no " + tried + "; a build without LibTorch has none)";
    return r;
}

const Loaded &loaded()
{
    static const Loaded l = [] {
        Startup &st = startup();
        if (cudaThread().joinable())
            st.ready.wait_for(std::chrono::seconds(5));
        st.loadStart = Clock::now();
        Loaded r = load();
        st.loadEnd = Clock::now();
        if (cudaThread().joinable())
            cudaThread().join(); // the context is made (or failed) before any Torch code runs
        if (std::getenv("HEADROOM_PROBE_STARTUP_TIMES")) { // for docs/performance.md
            auto ms = [&](Clock::time_point t) { return t == Clock::time_point{} ? -1.0 : std::chrono::duration<double, std::milli>(t - st.t0).count(); };
            std::fprintf(stderr, "headroom-probe: startup ms: driver %.1f, context %.1f, load %.1f-%.1f, joined %.1f\n",
                         ms(st.init), ms(st.context), ms(st.loadStart), ms(st.loadEnd), ms(Clock::now()));
        }
        return r;
    }();
    return l;
}

// The driver API's entry points, by name (libcuda.so.1 comes with the NVIDIA driver, not the
// toolkit: no link-time dependency, and nothing happens on a machine without it).
// cuInit loads the driver's own libraries with dlopen, which waits while another thread's dlopen
// runs Torch's static initialisers (the loader's lock): the driver is initialised first, then the
// context (no loading) is made while Torch loads.
void createPrimaryContext()
{
    Startup &st = startup();
    void *cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    using Init = int (*)(unsigned);
    using DeviceGet = int (*)(int *, int);
    using Retain = int (*)(void **, int);
    auto init = cuda ? reinterpret_cast<Init>(::dlsym(cuda, "cuInit")) : nullptr;
    auto deviceGet = cuda ? reinterpret_cast<DeviceGet>(::dlsym(cuda, "cuDeviceGet")) : nullptr;
    auto retain = cuda ? reinterpret_cast<Retain>(::dlsym(cuda, "cuDevicePrimaryCtxRetain")) : nullptr;
    int device = 0;
    const bool driver = init && deviceGet && retain && init(0) == 0 && deviceGet(&device, 0) == 0;
    st.init = Clock::now();
    st.driverReady.set_value();
    void *context = nullptr;
    // Retained for the process's life: the runtime retains the same context when Torch first
    // touches device 0, so its creation is what this thread takes off the critical path.
    if (driver)
        (void)retain(&context, device);
    st.context = Clock::now();
}

} // namespace

void prepareCuda()
{
    if (const char *v = std::getenv("HEADROOM_PROBE_EARLY_CONTEXT"); v && std::strcmp(v, "0") == 0)
        return;
    startup(); // its clock starts here; made before the thread's holder, so destroyed after its join
    if (cudaThread().joinable())
        return;
    try {
        cudaThread() = std::thread(createPrimaryContext);
    } catch (const std::system_error &) {
        // no thread: the runtime creates the context itself, later
    }
}

bool libtorchAvailable(std::string *why)
{
    const Loaded &l = loaded();
    if (!l.engine && why)
        *why = l.why;
    return l.engine != nullptr;
}

bool cudaUsable()
{
    const Loaded &l = loaded();
    return l.engine && l.engine->cudaUsable();
}

bool distributedAvailable(std::string *why)
{
    const Loaded &l = loaded();
    if (!l.engine) {
        if (why)
            *why = l.why;
        return false;
    }
    return l.engine->distributedAvailable(why);
}

Outcome run(const ProbeRequest &request, const Callbacks &callbacks, const Dist &dist)
{
    const Loaded &l = loaded();
    if (!l.engine) {
        Outcome out;
        out.code = NoDevice;
        out.message = l.why + ": use --engine transformers";
        return out;
    }
    return l.engine->run(request, callbacks, dist);
}

} // namespace headroom::probe
