#include "headroom/traced.h"

#include "headroom/config_json.h"
#include "headroom/error.h"
#include "headroom/json_input.h"

#include <nlohmann/json.hpp>

namespace headroom {

using nlohmann::json;

namespace {

std::string text(const json &j, const char *key, const char *field, size_t limit = 80)
{
    if (!j.contains(key) || j.at(key).is_null())
        return {};
    if (!j.at(key).is_string())
        throw InputError(field, j.at(key).dump().substr(0, 40), "must be a string");
    std::string s = j.at(key).get<std::string>();
    if (s.size() > limit)
        throw InputError(field, s.substr(0, 40) + "...", "longer than " + std::to_string(limit) + " characters");
    return s;
}

int64_t count(const json &j, const char *key, const char *field)
{
    if (!j.contains(key))
        throw InputError(field, "(missing)", "required field is missing");
    const json &v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 50))
        throw InputError(field, v.dump().substr(0, 40), "must be a whole number in [0, 2^50]");
    return v.get<int64_t>();
}

} // namespace

ProbeRequest traceRequest(const ModelArch &m, const TrainingConfig &c)
{
    ProbeRequest r;
    r.model = m;
    r.config = c;
    r.steps = 1;
    r.device = "cuda";
    r.engine = "transformers";
    return r;
}

TracedRun tracedRunFromJson(const json &j)
{
    if (!j.is_object())
        throw InputError("kind", "(not an object)", "a trace is a probe_timeline");
    const std::string kind = text(j, "kind", "kind", 40);
    if (kind != "probe_timeline")
        throw InputError("kind", kind.empty() ? "(missing)" : kind, "a trace is a probe_timeline");
    const std::string engine = text(j, "engine", "engine", 40);
    if (engine != "trace")
        throw InputError("engine", engine.empty() ? "(missing)" : engine,
                         "not a trace (headroom-probe --engine transformers --trace writes one)");
    TracedRun r;
    r.timeline = timelineFromJson(j);
    r.timeline.source = "traced";
    if (!j.contains("config") || !j.at("config").is_object())
        throw InputError("config", "(missing)", "the traced configuration is required");
    r.config = trainingConfigFromJson(j.at("config"));
    r.device = text(j, "device", "device", 16);
    if (r.device != "cuda" && r.device != "cpu")
        throw InputError("device", r.device.empty() ? "(missing)" : r.device, "must be cuda or cpu");
    if (!j.contains("parameters") || !j.at("parameters").is_object())
        throw InputError("parameters", "(missing)", "the traced model's parameter counts are required");
    r.totalParams = count(j.at("parameters"), "total", "parameters.total");
    r.trainableParams = count(j.at("parameters"), "trainable", "parameters.trainable");
    if (r.trainableParams > r.totalParams)
        throw InputError("parameters.trainable", std::to_string(r.trainableParams), "more than parameters.total");
    if (j.contains("engine_info") && j.at("engine_info").is_object()) {
        const json &i = j.at("engine_info");
        r.torchVersion = text(i, "torch", "engine_info.torch");
        r.transformersVersion = text(i, "transformers", "engine_info.transformers");
        r.peftVersion = text(i, "peft", "engine_info.peft");
    }
    r.modelType = text(j, "model_type", "model_type");
    if (r.modelType.empty() && j.contains("engine_info") && j.at("engine_info").is_object()) // traces before 2026-12-03's last
        r.modelType = text(j.at("engine_info"), "model_class", "engine_info.model_class");
    if (j.contains("timing") && j.at("timing").is_object() && j.at("timing").contains("trace_s") &&
        j.at("timing").at("trace_s").is_number())
        r.traceSeconds = j.at("timing").at("trace_s").get<double>();
    return r;
}

TracedRun readTracedRun(const std::string &path)
{
    return tracedRunFromJson(readJsonFile(path, "trace", 256u << 20));
}

Estimate estimateTraced(const TracedRun &run, const EstimatorOptions &options)
{
    ParamSummary p;
    p.total = run.totalParams;
    p.trainable = run.trainableParams;
    std::string stack = "traced with ";
    stack += run.transformersVersion.empty() ? std::string("your model factory")
                                             : "your transformers " + run.transformersVersion;
    if (!run.peftVersion.empty() && run.config.finetune != FineTune::Full)
        stack += ", peft " + run.peftVersion;
    if (!run.torchVersion.empty())
        stack += ", torch " + run.torchVersion;
    stack += run.device == "cuda" ? " (a CUDA step: its kernels' rules applied, see Note [Traced step])"
                                  : " (a CPU step: no CUDA kernel rules, no cuBLAS workspace)";
    std::vector<std::string> notes{stack};
    if (run.config.attention == Attention::Flash) // See Note [Flash kernels]
        notes.push_back("the flash kernel was traced as SDPA (flash-attn's kernels do not run on fake tensors): a "
                        "sliding window's mask is counted, which the flash kernel does not make");
    return estimateFromTrace(run.timeline, run.config, options, p, notes);
}

} // namespace headroom
