// headroom-probe: runs a real training step of a request and reports per-phase memory.
// Protocol (docs/probe-protocol.md): JSON lines on stdout, progress events then one result.
// Exit codes: 0 ok, 2 bad request, 3 out of memory, 4 no usable device, 5 internal error,
// 128+signal when stopped by SIGTERM/SIGINT.

#include "probe.h"

#include "headroom/config.h"
#include "headroom/error.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

using namespace headroom;
using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void onSignal(int sig)
{
    g_signal = sig;
    g_stop = true;
}

void emit(const json &j)
{
    std::fputs((j.dump() + "\n").c_str(), stdout);
    std::fflush(stdout);
}

int fail(int code, const std::string &message, const std::string &field = {})
{
    json e = {{"event", "error"}, {"code", code}, {"message", message}};
    if (!field.empty())
        e["field"] = field;
    emit(e);
    std::fprintf(stderr, "headroom-probe: %s\n", message.c_str());
    return code;
}

bool writeAtomically(const std::string &path, const json &j)
{
    {
        std::ofstream f(path + ".tmp");
        f << j.dump(1) << "\n";
        if (!f)
            return false;
    }
    return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
}

} // namespace

int main(int argc, char **argv)
{
    CLI::App app{"headroom-probe: measure one training step's memory, phase by phase"};
    app.set_version_flag("--version", std::string("headroom-probe ") + HEADROOM_VERSION);
    std::string requestPath, outPath, device, allocConf, snapshotPath;
    int steps = 0;
    app.add_option("--request", requestPath, "Request JSON file (default: read stdin)");
    app.add_option("--steps", steps, "Measured steps after one warm-up step (default 2)");
    app.add_option("--device", device, "auto | cuda | cpu (overrides the request)");
    app.add_option("--out", outPath, "Also write the result JSON to this file");
    app.add_option("--alloc-conf", allocConf, "PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True");
    app.add_option("--snapshot", snapshotPath, "Write the allocator's live blocks nearest the peak to this JSON file");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        return fail(probe::BadRequest, e.what());
    }
    std::signal(SIGTERM, onSignal);
    std::signal(SIGINT, onSignal);
    if (!allocConf.empty())
        setenv("PYTORCH_CUDA_ALLOC_CONF", allocConf.c_str(), 1); // before CUDA initialises

    ProbeRequest request;
    try {
        std::string text;
        if (requestPath.empty() || requestPath == "-") {
            text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        } else {
            std::ifstream in(requestPath);
            if (!in)
                return fail(probe::BadRequest, "--request = " + requestPath + ": cannot open the file", "--request");
            text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        json j;
        try {
            j = json::parse(text);
        } catch (const json::parse_error &e) {
            return fail(probe::BadRequest, std::string("request: not valid JSON (") + e.what() + ")", "request");
        }
        request = probeRequestFromJson(j);
        if (steps != 0) {
            if (steps < 1 || steps > 1000)
                return fail(probe::BadRequest, "--steps = " + std::to_string(steps) + ": must be between 1 and 1000",
                            "--steps");
            request.steps = steps;
        }
        if (!device.empty()) {
            if (device != "auto" && device != "cuda" && device != "cpu")
                return fail(probe::BadRequest, "--device = " + device + ": must be auto, cuda or cpu", "--device");
            request.device = device;
        }
        request.model.validate();
        request.config.validate();
        // One process, one device: several ranks (--nproc) and optimizer offload are issue #4.
        if (request.config.worldSize != 1)
            throw InputError("config.world_size", std::to_string(request.config.worldSize),
                             "the probe measures one GPU; set world_size to 1 (several GPUs: not yet)");
        if (request.config.offloadOptimizer)
            throw InputError("config.offload_optimizer", "true",
                             "the probe keeps the optimizer on the device; offload is estimated, not measured");
    } catch (const InputError &e) {
        return fail(probe::BadRequest, e.what(), e.field());
    } catch (const std::exception &e) {
        return fail(probe::BadRequest, std::string("request: ") + e.what(), "request");
    }

    probe::Callbacks cb;
    cb.stop = &g_stop;
    cb.snapshot = !snapshotPath.empty();
    cb.progress = [](int step, Phase phase, double fraction) {
        emit({{"event", "progress"}, {"step", step}, {"phase", toString(phase)}, {"fraction", fraction}});
    };
    probe::Outcome out;
    try {
        out = probe::run(request, cb);
    } catch (const std::exception &e) {
        return fail(probe::Internal, std::string("internal error: ") + e.what());
    }
    if (out.stopped) {
        emit({{"event", "stopped"}, {"signal", g_signal.load()}});
        return 128 + (g_signal.load() ? g_signal.load() : SIGTERM);
    }
    if (out.code != probe::Ok && out.code != probe::OutOfMemory)
        return fail(out.code, out.message);
    json result = toJson(out.measurement);
    emit(result);
    if (!outPath.empty() && !writeAtomically(outPath, result))
        return fail(probe::Internal, "--out = " + outPath + ": cannot write the file");
    if (!snapshotPath.empty() && !out.snapshot.is_null() && !writeAtomically(snapshotPath, out.snapshot))
        return fail(probe::Internal, "--snapshot = " + snapshotPath + ": cannot write the file");
    if (out.code == probe::OutOfMemory)
        std::fprintf(stderr, "headroom-probe: %s\n", out.message.c_str());
    return out.code;
}
