#include "traced_run.h"

#include "say.h"

#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/measurement.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

extern char **environ;

namespace headroom::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Output
{
    int code = -1;
    std::string out;
};

// Runs argv with stdout (and stderr, unless `keepStderr`) captured, at most `limit` bytes kept.
Output capture(const std::vector<std::string> &args, size_t limit, bool keepStderr = false)
{
    Output o;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return o;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    if (!keepStderr)
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    std::vector<char *> argv;
    for (const auto &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return o;
    }
    char buf[65536];
    for (;;) {
        const ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (o.out.size() < limit)
            o.out.append(buf, std::min(static_cast<size_t>(n), limit - o.out.size()));
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return o;
}

std::string probePath()
{
    if (const char *env = std::getenv("HEADROOM_PROBE"); env && *env)
        return env;
    const std::string dir = executableDir();
    for (const std::string &c : {dir + "/headroom-probe", dir + "/../probes/headroom-probe"})
        if (access(c.c_str(), X_OK) == 0)
            return c;
    return {};
}

std::string cacheDir()
{
    if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x == '/')
        return std::string(x) + "/headroom/traces";
    if (const char *h = std::getenv("HOME"); h && *h == '/')
        return std::string(h) + "/.cache/headroom/traces";
    return {};
}

} // namespace

TracedRun traceForEstimate(const ModelArch &m, const TrainingConfig &c, bool *cached)
{
    const std::string field = "config.model_type";
    // Traced for want of a row, or of a row that models this configuration (the caller said why).
    const std::string what = m.estimable ? "is modelled, but not this configuration" : "has no modelled row";
    const char *env = std::getenv("HEADROOM_PYTHON");
    const std::string python = env && *env ? env : "python3";
    // The versions, read from the installed packages' metadata (nothing is imported: fast).
    const Output v = capture({python, "-c",
                              "import importlib.metadata as m\n"
                              "for p in ('torch', 'transformers', 'peft'):\n"
                              "    try: print(p, m.version(p))\n"
                              "    except Exception: print(p, '-')\n"},
                             4096);
    if (v.code != 0)
        throw InputError(field, m.modelType,
                         what + ", and no Python to trace it with: '" + python +
                             "' did not run (set HEADROOM_PYTHON to the interpreter your training uses)");
    auto version = [&](const std::string &pkg) {
        const size_t at = v.out.find(pkg + " ");
        if (at == std::string::npos)
            return std::string("-");
        const size_t end = v.out.find('\n', at);
        return v.out.substr(at + pkg.size() + 1, end == std::string::npos ? std::string::npos : end - at - pkg.size() - 1);
    };
    const std::string torch = version("torch"), transformers = version("transformers"), peft = version("peft");
    // HEADROOM_MODEL_FACTORY: the model is built by the user's own build() (no Transformers needed).
    const char *factory = std::getenv("HEADROOM_MODEL_FACTORY");
    const bool ownModel = factory && *factory;
    std::string missing;
    for (const auto &[pkg, ver] : {std::pair{"torch", torch}, {"transformers", transformers}})
        if (ver == "-" && !(ownModel && std::string(pkg) == "transformers"))
            missing += (missing.empty() ? "" : " ") + std::string(pkg);
    if (c.finetune != FineTune::Full && peft == "-")
        missing += (missing.empty() ? "" : " ") + std::string("peft");
    if (!missing.empty())
        throw InputError(field, m.modelType,
                         what + "; tracing it needs " + missing + " in " + python +
                             " (pip install " + missing + ", or set HEADROOM_PYTHON to the interpreter your training uses)");

    const json rj = toJson(traceRequest(m, c));
    char key[17];
    std::snprintf(key, sizeof key, "%016llx",
                  static_cast<unsigned long long>(fnv1a64(rj.dump() + "\n" + python + "\n" + (ownModel ? std::string(factory) : "") + "\n" + torch + "\n" + transformers +
                                                        "\n" + peft + "\n" + HEADROOM_VERSION)));
    const std::string dir = cacheDir();
    const std::string path = dir.empty() ? std::string() : dir + "/" + key + ".json";
    std::error_code ec;
    if (!path.empty() && fs::is_regular_file(path, ec)) {
        try {
            TracedRun r = readTracedRun(path);
            if (cached)
                *cached = true;
            return r;
        } catch (const InputError &) {
            fs::remove(path, ec); // a damaged entry is traced again
        }
    }
    const std::string probe = probePath();
    if (probe.empty())
        throw InputError(field, m.modelType, what + ", and headroom-probe (which traces it) is not installed "
                                             "next to headroom-cli (set HEADROOM_PROBE)");
    std::string work = (dir.empty() ? std::string("/tmp") : dir);
    fs::create_directories(work, ec);
    std::string tmpl = work + "/trace-XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0)
        throw InputError("trace cache", work, std::string("cannot write there (") + std::strerror(errno) + ")");
    close(fd);
    const std::string requestPath = name.data();
    const std::string timelinePath = requestPath + ".timeline";
    struct Cleanup
    {
        std::string a, b;
        ~Cleanup()
        {
            ::remove(a.c_str());
            ::remove(b.c_str());
        }
    } cleanup{requestPath, timelinePath};
    writeFileAtomically(requestPath, rj.dump(), "trace request");
    say(stderr, "headroom-cli: ",
        m.modelType + " " + what + ": tracing it with " + (ownModel ? "your model factory " : "your transformers ") +
            (ownModel ? std::string(factory) : transformers) + " (torch " + torch + "; fake tensors, no GPU memory used)...");
    setenv("HEADROOM_PYTHON", python.c_str(), 1);
    const Output t = capture({probe, "--engine", "transformers", "--trace", "--request", requestPath, "--timeline",
                              timelinePath},
                             1 << 20);
    if (t.code != 0) {
        std::string why = "the trace failed (exit " + std::to_string(t.code) + ")";
        // The engine's error event names the field and the reason in one line.
        size_t at = t.out.rfind("{\"event\":\"error\"");
        if (at == std::string::npos)
            at = t.out.rfind("\"event\": \"error\"");
        if (at != std::string::npos) {
            const size_t start = t.out.rfind('{', at);
            const size_t end = t.out.find('\n', at);
            try {
                const json e = json::parse(t.out.substr(start, end == std::string::npos ? std::string::npos : end - start));
                why = e.value("message", why);
            } catch (const json::exception &) {
            }
        }
        throw InputError(field, m.modelType, what + " and could not be traced: " + why);
    }
    TracedRun r = readTracedRun(timelinePath);
    if (!path.empty() && std::rename(timelinePath.c_str(), path.c_str()) != 0)
        say(stderr, "headroom-cli: note: ", "the trace could not be cached in " + dir);
    if (cached)
        *cached = false;
    return r;
}

json tracedDocument(const TracedRun &run, const std::string &source, const Estimate &e, const Verdict &v,
                   const GpuSpec &gpu)
{
    json phases = json::array();
    for (const PhaseEstimate *p : e.stepPhases())
        phases.push_back({{"phase", toString(p->phase)}, {"peak_allocated_bytes", p->peakAllocatedBytes},
                          {"peak_reserved_bytes", p->peakReservedBytes}});
    return {{"source", "traced"},
            {"trace", source},
            {"model_type", run.modelType},
            {"parameters", {{"total", e.params.total}, {"trainable", e.params.trainable}}},
            {"phases", phases},
            {"peak",
             {{"phase", toString(e.peakPhase)},
              {"allocated_bytes", e.peakAllocatedBytes},
              {"reserved_bytes", e.peakReservedBytes},
              {"device_total_bytes", e.deviceTotalBytes}}},
            {"verdict",
             {{"gpu", gpu.id}, {"status", toString(v.fit)}, {"needed_bytes", v.neededBytes}, {"capacity_bytes", v.capacityBytes}}},
            {"notes", e.notes}};
}

} // namespace headroom::cli
