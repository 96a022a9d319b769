// headroom-probe: runs a real training step of a request and reports per-phase memory.
// Protocol (docs/probe-protocol.md): JSON lines on stdout, progress events then one result.
// Exit codes: 0 ok, 2 bad request, 3 out of memory, 4 no usable device, 5 internal error,
// 128+signal when stopped by SIGTERM/SIGINT.

#include "probe.h"

#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/json_input.h"
#include "headroom/estimator.h"
#include "headroom/serialize.h"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <csignal>
#include <execinfo.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

using namespace headroom;
using nlohmann::json;

namespace headroom::probe {

std::atomic<bool> g_stop{false};

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read (then no guard).
int64_t availableHostBytes()
{
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (in >> key >> kib >> unit)
        if (key == "MemAvailable:")
            return kib * 1024;
    return 0;
}
std::atomic<int> g_signal{0};

void emit(const json &j)
{
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

int fail(int code, const std::string &message, const std::string &field)
{
    // An error is never exit 0 or the out-of-memory result's 3, whatever code an engine's error
    // event carried (issue 32, row 12: an engine's {"code": 0} error made the probe exit 0).
    if (code == Ok || code == OutOfMemory || code < 0 || code > 255)
        code = Internal;
    json e = {{"event", "error"}, {"code", code}, {"message", message}};
    if (!field.empty())
        e["field"] = field;
    emit(e);
    std::fprintf(stderr, "headroom-probe: %s\n", oneLineValue(message, 4000).c_str());
    return code;
}

bool writeAtomically(const std::string &path, const json &j)
{
    // The one writer (headroom/files.h): a mkstemp temporary beside the target, renamed over it;
    // a FIFO or a device named by --out is refused, not replaced; a failed save leaves the old
    // file and no temporary behind.
    try {
        writeFileAtomically(path, j.dump(1) + "\n", "--out");
        return true;
    } catch (const InputError &e) {
        std::fprintf(stderr, "headroom-probe: %s\n", oneLineValue(e.what(), 4000).c_str());
        return false;
    }
}

bool publish(const json &result, const std::string &outPath)
{
    emit(result);
    if (!outPath.empty() && !writeAtomically(outPath, result)) {
        fail(Internal, "--out = " + outPath + ": cannot write the file");
        return false;
    }
    return true;
}

int stopped()
{
    emit({{"event", "stopped"}, {"signal", g_signal.load()}});
    return 128 + (g_signal.load() ? g_signal.load() : SIGTERM);
}

} // namespace headroom::probe

using namespace headroom::probe;

namespace {

void onSignal(int sig)
{
    g_signal = sig;
    g_stop = true;
}

// A crash leaves where it happened on stderr (the GUI shows stderr's tail): the faulting
// address, the instruction pointer and the mapping that holds it, the thread, and the call stack;
// then the process dies of the same signal, so the exit status still says what happened.
void onCrash(int sig, siginfo_t *info, void *context)
{
    char line[512];
    uintptr_t pc = 0;
#if defined(__x86_64__)
    pc = static_cast<uintptr_t>(static_cast<ucontext_t *>(context)->uc_mcontext.gregs[REG_RIP]);
#else
    (void)context;
#endif
    int n = std::snprintf(line, sizeof line, "headroom-probe: crashed (signal %d) at address %p, pc %p, thread %ld of %ld\n",
                          sig, info ? info->si_addr : nullptr, reinterpret_cast<void *>(pc),
                          static_cast<long>(syscall(SYS_gettid)), static_cast<long>(getpid()));
    (void)!write(STDERR_FILENO, line, static_cast<size_t>(std::max(n, 0)));
#if defined(__x86_64__)
    if (pc == 0) { // a call through a null pointer: the caller's return address is on the stack
        const auto *sp = reinterpret_cast<const uintptr_t *>(static_cast<ucontext_t *>(context)->uc_mcontext.gregs[REG_RSP]);
        pc = sp ? *sp : 0;
        n = std::snprintf(line, sizeof line, "headroom-probe: called from %p\n", reinterpret_cast<void *>(pc));
        (void)!write(STDERR_FILENO, line, static_cast<size_t>(std::max(n, 0)));
    }
#endif
    if (FILE *maps = std::fopen("/proc/self/maps", "r")) { // which library holds the pc
        while (std::fgets(line, sizeof line, maps)) {
            unsigned long lo = 0, hi = 0;
            if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && pc >= lo && pc < hi)
                (void)!write(STDERR_FILENO, line, std::strlen(line));
        }
        std::fclose(maps);
    }
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

// ---------------------------------------------------------------- --nproc: the launcher
// One process per rank, each this executable with --rank. They rendezvous through c10d's
// TCPStore on 127.0.0.1 (rank 0 serves it) and report JSON lines on their stdout, which the
// launcher reads: rank 0's progress is passed on, and the ranks' results become one result.

struct Child
{
    int rank = 0;
    bool started = false;
    pid_t pid = -1;
    int fd = -1;
    std::string buffer;
    bool done = false;
    int status = 0;
    std::optional<json> result;
    std::optional<json> error;
};

// CUDA_VISIBLE_DEVICES for rank r: the r-th of the launcher's own list, else r.
std::string visibleDeviceFor(int rank)
{
    const char *env = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!env || !*env)
        return std::to_string(rank);
    std::vector<std::string> ids;
    std::stringstream ss(env);
    for (std::string id; std::getline(ss, id, ',');)
        ids.push_back(id);
    return rank < static_cast<int>(ids.size()) ? ids[static_cast<size_t>(rank)] : std::string("none");
}

int launch(int nproc, const ProbeRequest &request, const std::vector<std::string> &passOn, const std::string &outPath)
{
    // Keep NVLink multicast (NVLS) off in every rank; the environment is inherited.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    char reqPath[] = "/tmp/headroom-probe-request-XXXXXX";
    const int rfd = mkstemp(reqPath);
    if (rfd < 0)
        return fail(probe::Internal, "cannot write the request for the ranks to /tmp");
    {
        const std::string text = toJson(request).dump();
        if (write(rfd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
            close(rfd);
            unlink(reqPath);
            return fail(probe::Internal, "cannot write the request for the ranks to /tmp");
        }
        close(rfd);
    }
    // Rank 0 first: it serves the TCPStore on a free port and announces it ({"event": "rendezvous"});
    // the others start then, with that port.
    std::vector<Child> kids(static_cast<size_t>(nproc));
    for (int r = 0; r < nproc; ++r)
        kids[static_cast<size_t>(r)].rank = r;
    auto spawn = [&](int r, int port) -> bool {
        int fds[2];
        if (pipe(fds) != 0)
            return false;
        std::vector<std::string> args = {"/proc/self/exe", "--request", reqPath, "--rank", std::to_string(r),
                                         "--nproc", std::to_string(nproc), "--master-port", std::to_string(port)};
        args.insert(args.end(), passOn.begin(), passOn.end());
        const std::string visible = visibleDeviceFor(r);
        const pid_t pid = fork();
        if (pid == 0) {
            dup2(fds[1], STDOUT_FILENO);
            close(fds[0]);
            close(fds[1]);
            if (request.device != "cpu")
                setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1); // rank r sees its GPU as device 0
            std::vector<char *> argv;
            for (auto &a : args)
                argv.push_back(a.data());
            argv.push_back(nullptr);
            execv("/proc/self/exe", argv.data());
            _exit(127);
        }
        close(fds[1]);
        if (pid < 0) {
            close(fds[0]);
            return false;
        }
        fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK); // one quiet rank blocks no other
        Child &k = kids[static_cast<size_t>(r)];
        k.started = true;
        k.pid = pid;
        k.fd = fds[0];
        return true;
    };
    if (!spawn(0, 0)) {
        unlink(reqPath);
        return fail(probe::Internal, "cannot start rank 0");
    }

    // Read every rank until all have exited. A rank that fails leaves its peers waiting in a
    // collective: they get SIGTERM, then SIGKILL after a grace period.
    using Clock = std::chrono::steady_clock;
    std::optional<Clock::time_point> killAt;
    bool forwarded = false;
    int cause = -1;
    auto stopAll = [&](int grace_ms) {
        for (auto &k : kids)
            if (k.started && !k.done)
                kill(k.pid, SIGTERM);
        if (!killAt)
            killAt = Clock::now() + std::chrono::milliseconds(grace_ms);
    };
    for (;;) {
        std::vector<pollfd> pfds;
        for (auto &k : kids)
            if (k.fd >= 0)
                pfds.push_back({k.fd, POLLIN, 0});
        if (pfds.empty())
            break;
        poll(pfds.data(), pfds.size(), 100);
        if (g_stop && !forwarded) {
            forwarded = true;
            stopAll(1000);
        }
        if (killAt && Clock::now() > *killAt)
            for (auto &k : kids)
                if (k.fd >= 0)
                    kill(k.pid, SIGKILL);
        for (auto &k : kids) {
            if (k.fd < 0)
                continue;
            char buf[65536];
            const ssize_t n = read(k.fd, buf, sizeof buf);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n <= 0) {
                close(k.fd);
                k.fd = -1;
                waitpid(k.pid, &k.status, 0);
                k.done = true;
                const bool ok = WIFEXITED(k.status) && (WEXITSTATUS(k.status) == probe::Ok ||
                                                        WEXITSTATUS(k.status) == probe::OutOfMemory);
                if (!ok && !killAt && cause < 0)
                    cause = k.rank; // the first to fail; its peers are stopped because of it
                if (!ok)
                    stopAll(2000);
                continue;
            }
            k.buffer.append(buf, static_cast<size_t>(n));
            for (size_t nl; (nl = k.buffer.find('\n')) != std::string::npos;) {
                const std::string line = k.buffer.substr(0, nl);
                k.buffer.erase(0, nl + 1);
                json j;
                try {
                    j = json::parse(line);
                } catch (const json::parse_error &) {
                    continue; // not protocol output (a library's print); the rank's exit decides
                }
                const std::string ev = stringOr(j, "event"); // a print that is JSON ("5") is not an event
                if (ev.empty())
                    continue;
                if (ev == "rendezvous" && k.rank == 0 && !kids.back().started && !killAt) {
                    const int port = j.contains("port") && j.at("port").is_number_integer() &&
                                             j.at("port").get<int64_t>() > 0 && j.at("port").get<int64_t>() < 65536
                                         ? j.at("port").get<int>() : 0;
                    for (int r = 1; r < nproc; ++r)
                        if (port <= 0 || !spawn(r, port)) {
                            cause = 0;
                            k.error = json{{"code", int(probe::Internal)},
                                           {"message", "cannot start rank " + std::to_string(r)}};
                            stopAll(0);
                            break;
                        }
                } else if (ev == "progress" && k.rank == 0)
                    emit(j);
                else if (ev == "result")
                    k.result = j;
                else if (ev == "error")
                    k.error = j;
            }
        }
    }
    unlink(reqPath);

    if (g_stop)
        return stopped();
    // An out-of-memory rank decides the outcome; its peers were stopped.
    for (auto &k : kids)
        if (k.result && k.result->contains("oom") && !k.result->at("oom").is_null()) {
            json r = *k.result;
            r["note"] = "rank " + std::to_string(k.rank) + " of " + std::to_string(nproc) +
                        " ran out of memory; the other ranks were stopped. " +
                        stringOr(r, "note");
            return publish(r, outPath) ? probe::OutOfMemory : probe::Internal;
        }
    // A rank without a result: report the one that failed first, not the peers stopped for it.
    for (auto &k : kids) {
        if (k.result || !k.started || (cause >= 0 && k.rank != cause))
            continue;
        int code = probe::Internal;
        std::string why;
        if (k.error) {
            const json &e = *k.error;
            if (e.contains("code") && e.at("code").is_number_integer())
                code = e.at("code").get<int>();
            why = stringOr(e, "message", "failed");
        } else if (WIFSIGNALED(k.status)) {
            why = std::string("killed by signal ") + std::to_string(WTERMSIG(k.status)) + " (" +
                  strsignal(WTERMSIG(k.status)) + ")";
        } else {
            why = "exited with status " + std::to_string(WEXITSTATUS(k.status)) + " without a result";
        }
        return fail(code, "rank " + std::to_string(k.rank) + ": " + why);
    }
    std::vector<Measurement> ranks;
    for (auto &k : kids)
        if (!k.result)
            return fail(probe::Internal, "rank " + std::to_string(k.rank) + " reported no result");
    try {
        for (auto &k : kids)
            ranks.push_back(measurementFromJson(*k.result));
        if (!publish(toJson(mergeRanks(std::move(ranks))), outPath))
            return probe::Internal;
    } catch (const InputError &e) {
        return fail(probe::Internal, std::string("the ranks' results do not agree: ") + e.what(), e.field());
    }
    return probe::Ok;
}

} // namespace

int probeMain(int argc, char **argv)
{
    {
        struct sigaction sa = {};
        sa.sa_sigaction = onCrash;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
            sigaction(sig, &sa, nullptr);
    }
    // Load CUDA kernels on first use, as PyTorch sets it before CUDA starts (torch/cuda/__init__.py, _lazy_init), so that
    // the context costs what it costs in a user's training process whatever the driver's default.
    setenv("CUDA_MODULE_LOADING", "LAZY", 0);
    CLI::App app{"headroom-probe: measure one training step's memory, phase by phase"};
    app.set_version_flag("--version", std::string("headroom-probe ") + HEADROOM_VERSION);
    std::string requestPath, outPath, device, allocConf, snapshotPath, timelinePath, engineName, python, factory;
    std::string sharding = "fsdp";
    int steps = 0, nproc = -1, rank = -1, masterPort = 0;
    int64_t memoryCap = 0;
    bool shareGpu = false, trace = false, traceByDepth = false, traceRanks = false;
    app.add_option("--request", requestPath, "Request JSON file (default: read stdin)");
    app.add_option("--engine", engineName,
                   "libtorch (default: Headroom's own step, fast) | transformers (your PyTorch + Transformers + PEFT)");
    app.add_option("--steps", steps,
                   "Measured steps after one warm-up step, all of them run (default: 2 at most; on CUDA the "
                   "LibTorch engine stops after the first when the allocator replay shows the second repeats it)");
    app.add_option("--device", device, "auto | cuda | cpu (overrides the request)");
    app.add_option("--out", outPath, "Also write the result JSON to this file");
    app.add_option("--alloc-conf", allocConf, "PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True");
    app.add_option("--snapshot", snapshotPath, "Write the allocator's live blocks nearest the peak to this JSON file");
    app.add_option("--timeline", timelinePath,
                   "transformers engine: write every allocation of the run, with phases, to this JSON file");
    app.add_option("--memory-cap-bytes", memoryCap,
                   "transformers engine: cap this process's memory (a smaller card on a bigger one)");
    app.add_option("--nproc", nproc,
                   "Processes (one per GPU) for data parallelism; overrides config.world_size (default: that)");
    app.add_flag("--trace", trace,
                 "transformers engine: run the step on fake tensors (nothing allocated) and write its allocations to "
                 "--timeline, for headroom-cli estimate --from-trace");
    app.add_flag("--trace-by-depth", traceByDepth,
                 "with --trace: trace three shallow depths and extrapolate to the model's (experimental)");
    app.add_flag("--trace-ranks", traceRanks,
                 "with --trace and several GPUs under FSDP2 (ZeRO-2/3): trace rank 0 over a fake process group "
                 "(experimental)");
    app.add_flag("--share-gpu", shareGpu, "transformers engine: all ranks on one GPU (Gloo), for per-rank peaks");
    app.add_option("--sharding", sharding, "transformers engine, ZeRO >= 1: fsdp (PyTorch) | deepspeed");
    app.add_option("--python", python, "transformers engine: the Python interpreter (default: $HEADROOM_PYTHON, python3)");
    std::string serveSocket;
    int idleSeconds = 900;
    app.add_option("--serve", serveSocket,
                   "transformers engine: be a warm worker on this Unix socket; runs with HEADROOM_ENGINE_WORKER set "
                   "to it skip the imports (docs/estimator.md Note [Warm worker])");
    app.add_option("--idle-s", idleSeconds, "with --serve: exit after this many idle seconds")
        ->check(CLI::Range(1, 86400));
    app.add_option("--model-factory", factory,
                   "transformers engine: build the model with build() from this Python file instead of Transformers");
    // Set by the launcher for each rank it starts (docs/probe-protocol.md).
    app.add_option("--rank", rank)->group("");
    app.add_option("--master-port", masterPort)->group("");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        return fail(probe::BadRequest, std::string(e.what()).substr(0, 500));
    }
    // No SA_RESTART: a read of stdin returns with EINTR, so SIGTERM is honoured there too.
    struct sigaction sa{};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    if (!allocConf.empty())
        setenv("PYTORCH_CUDA_ALLOC_CONF", allocConf.c_str(), 1); // before CUDA initialises
    if (!serveSocket.empty()) {
        if (!engineName.empty() && engineName != "transformers")
            return fail(probe::BadRequest, "--serve = " + serveSocket + ": only the transformers engine has a worker");
        return serveTransformersEngine(python, serveSocket, idleSeconds);
    }

    ProbeRequest request;
    protocol::Engine engine = protocol::Engine::LibTorch;
    try {
        json j;
        if (requestPath.empty() || requestPath == "-") {
            // Bounded: stdin may be endless; SIGTERM while waiting for it ends the read. The signal
            // may land on another thread (LibTorch starts some), which leaves read() blocked: poll
            // with a short timeout and look at the flag instead of relying on EINTR.
            std::string text;
            char buf[65536];
            for (;;) {
                struct pollfd pfd{STDIN_FILENO, POLLIN, 0};
                const int ready = poll(&pfd, 1, 100);
                if (g_stop)
                    return stopped();
                if (ready == 0 || (ready < 0 && errno == EINTR))
                    continue;
                const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
                if (n == 0)
                    break;
                if (n < 0) {
                    if (errno == EINTR && !g_stop)
                        continue;
                    if (g_stop)
                        return stopped();
                    return fail(probe::BadRequest, "request: cannot read stdin", "request");
                }
                text.append(buf, static_cast<size_t>(n));
                if (text.size() > (64u << 20))
                    return fail(probe::BadRequest, "request: more than 64 MiB on stdin", "request");
            }
            j = parseUntrusted(text, "request");
        } else {
            j = readJsonFile(requestPath, "--request");
        }
        request = probeRequestFromJson(j);
        engine = protocol::parseEngine(engineName.empty() ? request.engine : engineName);
        request.engine = std::string(protocol::toString(engine));
        if (steps != 0) {
            if (steps < 1 || steps > 1000)
                throw InputError("--steps", std::to_string(steps), "must be between 1 and 1000");
            request.steps = steps;
            request.earlyStop = false; // asked for: run every one
        }
        if (!device.empty()) {
            if (device != "auto" && device != "cuda" && device != "cpu")
                throw InputError("--device", device, "must be auto, cuda or cpu");
            request.device = device;
        }
        if (nproc != -1) {
            if (nproc < 1 || nproc > 64)
                throw InputError("--nproc", std::to_string(nproc), "must be between 1 and 64");
            request.config.worldSize = nproc;
        }
        if (trace && timelinePath.empty())
            throw InputError("--trace", "given", "needs --timeline FILE, where the traced allocations go");
        if (traceByDepth && !trace)
            throw InputError("--trace-by-depth", "given", "needs --trace");
        if (traceRanks && !trace)
            throw InputError("--trace-ranks", "given", "needs --trace");
        if (memoryCap < 0)
            throw InputError("--memory-cap-bytes", std::to_string(memoryCap), "must be positive");
        if (sharding != "fsdp" && sharding != "deepspeed")
            throw InputError("--sharding", sharding, "must be fsdp or deepspeed");
        request.config.validate();
        if (request.config.worldSize > 64)
            throw InputError("config.world_size", std::to_string(request.config.worldSize),
                             "the probe starts one process per rank on this machine, at most 64");
        if (engine == protocol::Engine::LibTorch) {
            for (auto [flag, given] : {std::pair{"--timeline", !timelinePath.empty()}, {"--trace", trace}, {"--share-gpu", shareGpu},
                                       {"--model-factory", !factory.empty()}, {"--memory-cap-bytes", memoryCap != 0},
                                       {"--python", !python.empty()}, {"--sharding", sharding != "fsdp"}})
                if (given)
                    throw InputError(flag, "given", "needs --engine transformers");
            request.model.validate(); // the LibTorch engine builds only what core can describe
            if (const auto no = libtorchRefusal(request.model, request.config))
                throw InputError(no->field, no->value, no->reason);
            if (request.config.offloadOptimizer)
                throw InputError("config.offload_optimizer", "true",
                                 "the probe keeps the optimizer on the device; offload is estimated, not measured");
        }
        // One GPU process: its CUDA context is made while the LibTorch engine's libraries load
        // (torch_module.cpp). A launcher's ranks pick their own devices and make their own.
        if (engine == protocol::Engine::LibTorch && request.device != "cpu" && rank < 0 && nproc == -1 &&
            request.config.worldSize == 1)
            probe::prepareCuda();
        // A CPU run lives in host memory: one that cannot fit is refused before it starts, naming
        // the estimate (every rank on this machine) and what the machine has free.
        const bool onCpu = request.device == "cpu" ||
                           (request.device == "auto" && engine == protocol::Engine::LibTorch && !probe::cudaUsable());
        if (onCpu && request.model.estimable && !trace) { // a trace allocates nothing
            const int64_t free = availableHostBytes();
            int64_t need = 0;
            try {
                need = checkedMul(estimate(request.model, request.config).peakAllocatedBytes, request.config.worldSize);
            } catch (const InputError &) {
                need = 0; // what the estimator cannot size, the run will say for itself
            }
            if (free > 0 && need > free)
                throw InputError("device", "cpu",
                                 "the run needs about " + formatGiB(need) + " (the estimate, " +
                                     std::to_string(request.config.worldSize) + (request.config.worldSize > 1 ? " ranks" : " rank") +
                                     ") and this machine has " + formatGiB(free) + " available");
        }
    } catch (const InputError &e) {
        return fail(probe::BadRequest, e.what(), e.field());
    } catch (const std::exception &e) {
        return fail(probe::BadRequest, std::string("request: ") + e.what(), "request");
    }

    if (engine == protocol::Engine::Transformers) {
        EngineOptions o;
        o.python = python;
        o.modelFactory = factory;
        o.snapshotPath = snapshotPath;
        o.timelinePath = timelinePath;
        o.allocConf = allocConf;
        o.outPath = outPath;
        o.sharding = sharding;
        o.memoryCapBytes = memoryCap;
        o.shareGpu = shareGpu;
        o.trace = trace;
        o.traceByDepth = traceByDepth;
        o.traceRanks = traceRanks;
        const int code = runTransformersEngine(request, o);
        // Leave without static destructors (this path never loads the LibTorch engine's module;
        // engine_launcher.cpp says what a linked LibTorch once did to remove_all at exit).
        const bool written = std::fflush(stdout) == 0 && !std::ferror(stdout);
        if (!written)
            std::fprintf(stderr, "headroom-probe: stdout: the events could not be written (%s)\n", std::strerror(errno));
        std::fflush(stderr);
        std::_Exit(written || code != 0 ? code : Internal);
    }
    if (std::string why; !probe::libtorchAvailable(&why))
        return fail(probe::NoDevice, why + ": use --engine transformers", "package");

    const bool several = nproc != -1 || request.config.worldSize > 1;
    if (several && rank < 0) {
        std::string why;
        if (!probe::distributedAvailable(&why))
            return fail(probe::BadRequest, "config.world_size = " + std::to_string(request.config.worldSize) + ": " + why,
                        "config.world_size");
        std::vector<std::string> passOn;
        if (!device.empty() || request.device != "auto")
            passOn.insert(passOn.end(), {"--device", request.device});
        if (!allocConf.empty())
            passOn.insert(passOn.end(), {"--alloc-conf", allocConf});
        if (!snapshotPath.empty())
            passOn.insert(passOn.end(), {"--snapshot", snapshotPath + ".rank"});
        return launch(request.config.worldSize, request, passOn, outPath);
    }
    probe::Dist dist;
    if (rank >= 0) {
        if (rank >= request.config.worldSize || masterPort < 0 || masterPort > 65535 || (masterPort == 0 && rank != 0))
            return fail(probe::BadRequest,
                        "--rank = " + std::to_string(rank) + ": needs --nproc above it and --master-port (the launcher "
                        "sets both)",
                        "--rank");
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        dist.enabled = true;
        dist.rank = rank;
        dist.worldSize = request.config.worldSize;
        dist.port = masterPort;
        dist.announce = [](int port) { emit({{"event", "rendezvous"}, {"port", port}}); };
        if (!snapshotPath.empty())
            snapshotPath += std::to_string(rank); // FILE.rank0, FILE.rank1, ...
    }

    probe::Callbacks cb;
    cb.stop = &g_stop;
    cb.snapshot = !snapshotPath.empty();
    cb.progress = [](int step, Phase phase, double fraction) {
        emit({{"event", "progress"}, {"step", step}, {"phase", toString(phase)}, {"fraction", fraction}});
    };
    probe::Outcome out;
    try {
        out = probe::run(request, cb, dist);
    } catch (const std::exception &e) {
        return fail(probe::Internal, std::string("internal error: ") + e.what());
    }
    if (out.stopped)
        return stopped();
    if (out.code != probe::Ok && out.code != probe::OutOfMemory)
        return fail(out.code, out.message, out.code == probe::NoDevice ? "device" : "");
    if (!publish(toJson(out.measurement), outPath))
        return probe::Internal;
    if (!snapshotPath.empty() && !out.snapshot.is_null() && !writeAtomically(snapshotPath, out.snapshot))
        return fail(probe::Internal, "--snapshot = " + snapshotPath + ": cannot write the file");
    if (out.code == probe::OutOfMemory)
        std::fprintf(stderr, "headroom-probe: %s\n", oneLineValue(out.message, 4000).c_str());
    return out.code;
}

// The protocol's lines go to stdout: a full disk or a closed pipe must not end in exit 0 with the
// events lost (issue 15: the probe exited 0 with stdout on /dev/full).
// Once the answer is written, the probe leaves with _Exit (See Note [Probe exit]).
int main(int argc, char **argv)
{
    int rc = probeMain(argc, argv);
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "headroom-probe: stdout: the events could not be written (%s)\n", std::strerror(errno));
        rc = rc != 0 ? rc : Internal;
    }
    if (const char *full = std::getenv("HEADROOM_PROBE_FULL_EXIT"); full && std::string_view(full) == "1")
        return rc;
#if defined(__SANITIZE_ADDRESS__)
    return rc; // the sanitizer's leak check runs at exit
#endif
    std::fflush(stderr);
    std::_Exit(rc);
}
