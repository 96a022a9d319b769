// headroom-probe --engine transformers: runs headroom_engine.py in the user's Python, in one
// process or one per rank under torchrun, and passes its protocol on. Every line the engine
// writes is read by core's protocol reader before it goes further, so the GUI and the CLI see
// the same protocol whichever engine measured. Torch-free: this file builds without LibTorch.

#include "probe.h"

#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/serialize.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

namespace headroom::probe {

using nlohmann::json;
namespace fs = std::filesystem;

std::string selfDir()
{
    return executableDir();
}

namespace {

// $HEADROOM_ENGINE_SCRIPT, then next to this executable (build tree), then ../share/headroom.
std::string locateScript(std::vector<std::string> &searched)
{
    if (const char *env = std::getenv("HEADROOM_ENGINE_SCRIPT"); env && *env)
        searched.emplace_back(env);
    const std::string dir = selfDir();
    searched.push_back(dir + "/headroom_engine.py");
    searched.push_back(dir + "/../share/headroom/headroom_engine.py");
    for (const auto &c : searched)
        if (access(c.c_str(), R_OK) == 0)
            return fs::weakly_canonical(c).string();
    return {};
}

// An interpreter given by path must exist; a bare name is looked up on PATH.
std::string locatePython(const std::string &given)
{
    std::string name = given;
    if (name.empty())
        if (const char *env = std::getenv("HEADROOM_PYTHON"); env && *env)
            name = env;
    if (name.empty())
        name = "python3";
    if (name.find('/') != std::string::npos)
        return access(name.c_str(), X_OK) == 0 ? name : std::string();
    const char *path = std::getenv("PATH");
    std::string p = path ? path : "/usr/bin:/bin";
    size_t start = 0;
    while (start <= p.size()) {
        const size_t end = p.find(':', start);
        const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
        const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
        if (access(cand.c_str(), X_OK) == 0)
            return cand;
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return {};
}

struct Child
{
    pid_t pid = -1;
    int fd = -1;
};

// posix_spawn, not fork: a LibTorch-linked headroom-probe has CUDA's and LibTorch's pthread_atfork
// handlers, and after a fork()ed engine run it died of SIGSEGV on the H200 with its result already
// written (rc 139, the crashing frame's stack unreadable). glibc's posix_spawn runs no fork handlers.
Child spawn(const std::vector<std::string> &args)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return {};
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO); // dup2 clears FD_CLOEXEC
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0); // the engine and torchrun's workers: one group to stop together
    std::vector<char *> argv;
    for (const auto &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, args[0].c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (rc != 0) {
        std::fprintf(stderr, "headroom-probe: cannot start %s: %s\n", args[0].c_str(), std::strerror(rc));
        close(fds[0]);
        return {};
    }
    return {pid, fds[0]};
}

// The engine's words, as the one sanitiser shows any text from outside: control characters
// (terminal escapes, forged lines) escaped, bounded (issue 32, row 7).
std::string oneLine(const std::string &s, size_t n = 300) { return oneLineValue(s, n); }

} // namespace

namespace {
// The engine's script and interpreter, or the exit code of the one-line error that says which is
// missing (a run and a warm worker start the same two).
int locateEngine(const std::string &pythonOption, std::string &script, std::string &python)
{
    std::vector<std::string> searched;
    script = locateScript(searched);
    if (script.empty()) {
        std::string where;
        for (const auto &s : searched)
            where += (where.empty() ? "" : ", ") + s;
        return fail(NoDevice, "the transformers engine (headroom_engine.py) is not installed; looked in " + where +
                                  " (set HEADROOM_ENGINE_SCRIPT)",
                    "package");
    }
    python = locatePython(pythonOption);
    if (python.empty())
        return fail(NoDevice, "no Python interpreter for the transformers engine: '" +
                                  (pythonOption.empty() ? std::string("python3") : pythonOption) +
                                  "' not found (set --python, HEADROOM_PYTHON or Settings)",
                    "package");
    return 0;
}
} // namespace

int serveTransformersEngine(const std::string &pythonOption, const std::string &socketPath, int idleSeconds)
{
    std::string script, python;
    if (const int code = locateEngine(pythonOption, script, python); code != 0)
        return code;
    setenv("PYTHONUNBUFFERED", "1", 1);
    const std::string idle = std::to_string(idleSeconds);
    std::vector<const char *> argv = {python.c_str(), script.c_str(), "--serve", socketPath.c_str(), "--idle-s",
                                      idle.c_str(), nullptr};
    execv(python.c_str(), const_cast<char *const *>(argv.data()));
    return fail(Internal, "cannot start " + python + ": " + std::strerror(errno));
}

int runTransformersEngine(const ProbeRequest &request, const EngineOptions &o)
{
    std::string script, python;
    if (const int code = locateEngine(o.python, script, python); code != 0)
        return code;

    // The request for the engine, and a folder for the ranks' results.
    char dirTemplate[] = "/tmp/headroom-engine-XXXXXX";
    if (!mkdtemp(dirTemplate))
        return fail(Internal, "cannot make a temporary folder in /tmp");
    const std::string dir = dirTemplate;
    struct Cleanup
    {
        std::string dir;
        // libc's nftw, not std::filesystem::remove_all: when headroom-probe was linked against
        // PyTorch's LibTorch (2.11 wheel), remove_all called address 0 from inside libtorch.so
        // (SIGSEGV after every transformers-engine run on the H200, result already written). The
        // engine is a module now, never loaded on this path; nftw stays, as cheap as ever.
        ~Cleanup()
        {
            nftw(
                dir.c_str(),
                [](const char *path, const struct stat *, int, struct FTW *) { ::remove(path); return 0; }, 16,
                FTW_DEPTH | FTW_PHYS);
        }
    } cleanup{dir};
    const std::string requestPath = dir + "/request.json";
    if (!writeAtomically(requestPath, toJson(request)))
        return fail(Internal, "cannot write the request to " + requestPath);

    const int nproc = o.trace ? 1 : request.config.worldSize; // a trace is one process (the engine says what it follows)
    std::vector<std::string> args = {python, script};
    if (nproc > 1) // the engine starts torch.distributed.run (torchrun) with one copy of itself per rank
        args.insert(args.end(), {"--torchrun", std::to_string(nproc)});
    args.insert(args.end(), {"--request", requestPath, "--steps", std::to_string(request.steps), "--device",
                             request.device});
    if (!o.allocConf.empty())
        args.insert(args.end(), {"--alloc-conf", o.allocConf});
    if (!o.snapshotPath.empty())
        args.insert(args.end(), {"--snapshot", o.snapshotPath});
    if (!o.timelinePath.empty())
        args.insert(args.end(), {"--timeline", o.timelinePath});
    if (o.trace)
        args.emplace_back("--trace");
    if (o.traceByDepth)
        args.emplace_back("--trace-by-depth");
    if (o.traceRanks)
        args.emplace_back("--trace-ranks");
    if (o.trace && request.config.worldSize > 1) // the ranks the trace follows are sharded as asked
        args.insert(args.end(), {"--sharding", o.sharding});
    if (o.memoryCapBytes > 0)
        args.insert(args.end(), {"--memory-cap-bytes", std::to_string(o.memoryCapBytes)});
    if (!o.modelFactory.empty())
        args.insert(args.end(), {"--model-factory", fs::absolute(o.modelFactory).string()});
    if (nproc > 1) {
        args.insert(args.end(), {"--rank-dir", dir, "--sharding", o.sharding});
        if (o.shareGpu)
            args.emplace_back("--share-gpu");
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1); // NVLink multicast stays off in every rank
    setenv("PYTHONUNBUFFERED", "1", 1);
    if (!o.allocConf.empty())
        setenv("PYTORCH_CUDA_ALLOC_CONF", o.allocConf.c_str(), 1);

    Child child = spawn(args);
    if (child.pid < 0)
        return fail(Internal, "cannot start " + python);

    // Read the engine's lines until it exits; stop it (its whole group) on SIGTERM/SIGINT.
    using Clock = std::chrono::steady_clock;
    std::optional<Clock::time_point> killAt;
    std::string buffer;
    std::optional<json> result;
    std::optional<protocol::ErrorEvent> error;
    std::string malformed;
    bool sawStopped = false;
    auto handle = [&](const std::string &text) {
        if (text.empty())
            return;
        const protocol::Line line = protocol::parseLine(text);
        switch (line.kind) {
        case protocol::Line::Kind::Progress:
            if (!result)
                emit(json::parse(text));
            break;
        case protocol::Line::Kind::Result:
            result = json::parse(text);
            break;
        case protocol::Line::Kind::Error:
            error = line.error;
            break;
        case protocol::Line::Kind::Stopped:
            sawStopped = true;
            break;
        case protocol::Line::Kind::Malformed:
            if (malformed.empty())
                malformed = line.problem;
            break;
        default: // a library's print on stdout: not protocol, passed to stderr
            std::fprintf(stderr, "%s\n", oneLine(text, 2000).c_str());
        }
    };
    fcntl(child.fd, F_SETFL, fcntl(child.fd, F_GETFL) | O_NONBLOCK);
    bool forwarded = false;
    // The engine is reaped as soon as it exits: what it wrote is in the pipe already, so once the
    // pipe is drained the read ends, even if a process it left behind holds its stdout open
    // (issue 32, row 10: a grandchild held the probe until it exited).
    bool reaped = false;
    int status = 0;
    for (;;) {
        pollfd p{child.fd, POLLIN, 0};
        poll(&p, 1, 100);
        if (g_stop && !forwarded) {
            forwarded = true;
            kill(-child.pid, SIGTERM);
            killAt = Clock::now() + std::chrono::milliseconds(protocol::kEngineStopGraceMs);
        }
        if (killAt && Clock::now() > *killAt) {
            kill(-child.pid, SIGKILL);
            killAt.reset();
        }
        char buf[65536];
        const ssize_t n = read(child.fd, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (reaped)
                break; // drained after the engine's exit
            if (waitpid(child.pid, &status, WNOHANG) == child.pid)
                reaped = true; // read once more: whatever it wrote before exiting
            continue;
        }
        if (n <= 0)
            break;
        buffer.append(buf, static_cast<size_t>(n));
        for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
            handle(buffer.substr(0, nl));
            buffer.erase(0, nl + 1);
        }
        if (buffer.size() > protocol::kMaxLineBytes) {
            if (malformed.empty())
                malformed = "a line of more than " + std::to_string(protocol::kMaxLineBytes) + " bytes";
            buffer.clear();
        }
    }
    handle(buffer);
    close(child.fd);
    while (!reaped && waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
        if (g_stop && !forwarded) {
            forwarded = true;
            kill(-child.pid, SIGTERM);
        }
    }
    kill(-child.pid, SIGKILL); // no worker outlives the engine
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    // A whole result line is the run's answer, whatever the engine did after it (stopped, killed,
    // a failing teardown): it is published, not dropped (issue 32, row 12).
    if (nproc == 1 && !o.trace && result && malformed.empty()) {
        if (!publish(*result, o.outPath))
            return Internal;
        return result->contains("oom") && !result->at("oom").is_null() ? OutOfMemory : Ok;
    }
    if (g_stop)
        return stopped();
    if (!malformed.empty())
        return fail(Internal, "the transformers engine's output is malformed: " + oneLine(malformed));
    if (sawStopped)
        return stopped();

    if (o.trace) { // a trace leaves its timeline and prints no result
        if (code == 0 && WIFEXITED(status) && access(o.timelinePath.c_str(), R_OK) == 0)
            return 0;
        if (error)
            return fail(error->code, error->message, error->field);
        return fail(Internal, "the transformers engine's trace exited with status " + std::to_string(code) +
                                  " without a timeline");
    }
    if (nproc == 1) {
        if (error)
            return fail(error->code, error->message, error->field);
        if (WIFSIGNALED(status))
            return fail(Internal, std::string("the transformers engine was killed by signal ") +
                                      std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")");
        return fail(Internal, "the transformers engine exited with status " + std::to_string(code) +
                                  " without a result");
    }

    // Several ranks: each wrote rankR.json (or rankR.error.json) in the folder.
    std::vector<Measurement> ranks;
    std::optional<std::pair<int, protocol::ErrorEvent>> firstError;
    for (int r = 0; r < nproc; ++r) {
        const std::string res = dir + "/rank" + std::to_string(r) + ".json";
        const std::string err = dir + "/rank" + std::to_string(r) + ".error.json";
        try {
            if (access(res.c_str(), R_OK) == 0) {
                ranks.push_back(protocol::readResultFile(res));
                continue;
            }
            if (access(err.c_str(), R_OK) == 0 && !firstError) {
                const protocol::Line l = protocol::parseLine(readJsonFile(err, "rank error").dump());
                if (l.kind == protocol::Line::Kind::Error)
                    firstError = std::pair{r, l.error};
            }
        } catch (const InputError &e) {
            return fail(Internal, "rank " + std::to_string(r) + ": its result is malformed: " + oneLine(e.what()));
        }
    }
    for (const auto &m : ranks)
        if (m.oom) {
            json j = toJson(mergeRanks(ranks));
            j["note"] = "a rank ran out of memory; " + j.value("note", std::string());
            return publish(j, o.outPath) ? OutOfMemory : Internal;
        }
    if (firstError)
        return fail(firstError->second.code, "rank " + std::to_string(firstError->first) + ": " + firstError->second.message,
                    firstError->second.field);
    if (static_cast<int>(ranks.size()) != nproc)
        return fail(Internal, "torchrun exited with status " + std::to_string(code) + " and " +
                                  std::to_string(ranks.size()) + " of " + std::to_string(nproc) +
                                  " ranks reported a result (its messages are on stderr)");
    try {
        Measurement merged = mergeRanks(std::move(ranks));
        return publish(toJson(merged), o.outPath) ? Ok : Internal;
    } catch (const InputError &e) {
        return fail(Internal, std::string("the ranks' results do not agree: ") + e.what(), e.field());
    }
}

} // namespace headroom::probe
