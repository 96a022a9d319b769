#include "headroom/serialize.h"

#include "headroom/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace headroom {

using nlohmann::json;

namespace {
std::string show(const json &v) { return showJson(v); }
} // namespace

const json &requireField(const json &obj, const std::string &key, const std::string &ctx)
{
    if (!obj.is_object())
        throw InputError(ctx, show(obj).substr(0, 40), "must be a JSON object");
    auto it = obj.find(key);
    if (it == obj.end())
        throw InputError(ctx + "." + key, "(missing)", "required field is missing");
    return *it;
}

int64_t requireInt64(const json &obj, const std::string &key, const std::string &ctx, int64_t lo, int64_t hi)
{
    const json &v = requireField(obj, key, ctx);
    if (!v.is_number_integer())
        throw InputError(ctx + "." + key, show(v), "must be a whole number");
    const int64_t n = v.get<int64_t>();
    if (n < lo || n > hi)
        throw InputError(ctx + "." + key, show(v),
                         "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return n;
}

void requireSchema(const json &j, const std::string &ctx)
{
    if (!j.is_object())
        throw InputError(ctx, show(j).substr(0, 40), "must be a JSON object");
    const int64_t v = requireInt64(j, "schema_version", ctx, 1, 1000);
    if (v != kSchemaVersion)
        throw InputError(ctx + ".schema_version", std::to_string(v),
                         "unsupported (this build reads " + std::to_string(kSchemaVersion) + ")");
}

std::string showJson(const json &v, size_t limit)
{
    std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > limit)
        s = s.substr(0, limit) + "...";
    return s;
}

json parseUntrusted(const std::string &text, const std::string &ctx, size_t maxBytes, int maxDepth)
{
    if (text.size() > maxBytes)
        throw InputError(ctx, std::to_string(text.size()) + " bytes",
                         "too large (the limit is " + std::to_string(maxBytes) + " bytes)");
    // nlohmann's parser recurses per nesting level; a hostile file of a million '[' would
    // overflow the stack, so the callback refuses deep nesting before the recursion gets there.
    const auto limitDepth = [&](int depth, json::parse_event_t, json &) {
        if (depth > maxDepth)
            throw InputError(ctx, "nesting depth " + std::to_string(depth),
                             "nested deeper than " + std::to_string(maxDepth) + " levels");
        return true;
    };
    try {
        return json::parse(text, limitDepth);
    } catch (const json::parse_error &e) {
        throw InputError(ctx, "(" + std::to_string(text.size()) + " bytes)", std::string("not valid JSON: ") + e.what());
    } catch (const json::out_of_range &e) { // a number too large for a double (1e400)
        throw InputError(ctx, "(" + std::to_string(text.size()) + " bytes)", std::string("not valid JSON: ") + e.what());
    }
}

json readJsonFile(const std::string &path, const std::string &field, size_t maxBytes)
{
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f)
        throw InputError(field, path, std::string("cannot open the file (") + std::strerror(errno) + ")");
    std::string text;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
        text.append(buf, n);
        if (text.size() > maxBytes)
            throw InputError(field, path, "too large (the limit is " + std::to_string(maxBytes) + " bytes)");
    }
    if (std::ferror(f.get()))
        throw InputError(field, path, "cannot read the file");
    return parseUntrusted(text, field, maxBytes);
}

json toJson(const TrainingConfig &c)
{
    json j = {{"precision", toString(c.precision)},
            {"optimizer", toString(c.optimizer)},
            {"optimizer_impl", toString(c.optimizerImpl)},
            {"finetune", toString(c.finetune)},
            {"lora", {{"rank", c.lora.rank}, {"alpha", c.lora.alpha}, {"dropout", c.lora.dropout},
                      {"targets", c.lora.targets}, {"double_quant", c.lora.doubleQuant}}},
            {"micro_batch", c.microBatch},
            {"seq_len", c.seqLen},
            {"grad_accum", c.gradAccum},
            {"grad_checkpointing", c.gradCheckpointing},
            {"attention", toString(c.attention)},
            {"world_size", c.worldSize},
            {"zero_stage", c.zeroStage},
            {"offload_optimizer", c.offloadOptimizer}};
    if (c.loss != Loss::Standard) // written only when set: documents from before stay byte-identical
        j["loss"] = toString(c.loss);
    if (c.checkpointLayers > 0)
        j["checkpoint_layers"] = c.checkpointLayers;
    if (c.checkpointEvery > 1)
        j["checkpoint_every"] = c.checkpointEvery;
    if (c.activationOffload)
        j["activation_offload"] = true;
    return j;
}

TrainingConfig trainingConfigFromJson(const json &j)
{
    const std::string ctx = "config";
    TrainingConfig c;
    auto str = [&](const char *key) -> std::string {
        const json &v = requireField(j, key, ctx);
        if (!v.is_string())
            throw InputError(ctx + "." + key, show(v), "must be a string");
        return v.get<std::string>();
    };
    c.precision = parsePrecision(str("precision"), ctx + ".precision");
    c.optimizer = parseOptimizer(str("optimizer"), ctx + ".optimizer");
    if (j.contains("optimizer_impl"))
        c.optimizerImpl = parseOptimizerImpl(str("optimizer_impl"), ctx + ".optimizer_impl");
    c.finetune = parseFineTune(str("finetune"), ctx + ".finetune");
    c.microBatch = requireInt64(j, "micro_batch", ctx, 1, 1 << 20);
    c.seqLen = requireInt64(j, "seq_len", ctx, 1, 1 << 24);
    if (j.contains("grad_accum"))
        c.gradAccum = requireInt64(j, "grad_accum", ctx, 1, 1 << 20);
    if (j.contains("grad_checkpointing")) {
        if (!j.at("grad_checkpointing").is_boolean())
            throw InputError(ctx + ".grad_checkpointing", show(j.at("grad_checkpointing")), "must be true or false");
        c.gradCheckpointing = j.at("grad_checkpointing").get<bool>();
    }
    if (j.contains("checkpoint_layers"))
        c.checkpointLayers = requireInt64(j, "checkpoint_layers", ctx, 0, 1 << 20);
    if (j.contains("checkpoint_every"))
        c.checkpointEvery = requireInt64(j, "checkpoint_every", ctx, 0, 1 << 20);
    if (j.contains("attention"))
        c.attention = parseAttention(str("attention"), ctx + ".attention");
    if (j.contains("loss"))
        c.loss = parseLoss(str("loss"), ctx + ".loss");
    if (j.contains("world_size"))
        c.worldSize = static_cast<int>(requireInt64(j, "world_size", ctx, 1, 1 << 16));
    if (j.contains("zero_stage"))
        c.zeroStage = static_cast<int>(requireInt64(j, "zero_stage", ctx, 0, 3));
    if (j.contains("offload_optimizer")) {
        if (!j.at("offload_optimizer").is_boolean())
            throw InputError(ctx + ".offload_optimizer", show(j.at("offload_optimizer")), "must be true or false");
        c.offloadOptimizer = j.at("offload_optimizer").get<bool>();
    }
    if (j.contains("activation_offload")) {
        if (!j.at("activation_offload").is_boolean())
            throw InputError(ctx + ".activation_offload", show(j.at("activation_offload")), "must be true or false");
        c.activationOffload = j.at("activation_offload").get<bool>();
    }
    if (j.contains("lora")) {
        const json &l = j.at("lora");
        const std::string lc = ctx + ".lora";
        if (!l.is_object())
            throw InputError(lc, show(l).substr(0, 40), "must be a JSON object");
        if (l.contains("rank"))
            c.lora.rank = static_cast<int>(requireInt64(l, "rank", lc, 1, 1 << 16));
        if (l.contains("alpha")) {
            if (!l.at("alpha").is_number())
                throw InputError(lc + ".alpha", show(l.at("alpha")), "must be a number");
            c.lora.alpha = l.at("alpha").get<double>();
        }
        if (l.contains("dropout")) {
            if (!l.at("dropout").is_number())
                throw InputError(lc + ".dropout", show(l.at("dropout")), "must be a number");
            c.lora.dropout = l.at("dropout").get<double>();
        }
        if (l.contains("targets")) {
            const json &t = l.at("targets");
            if (!t.is_array())
                throw InputError(lc + ".targets", show(t).substr(0, 40), "must be an array of module names");
            c.lora.targets.clear();
            for (const auto &e : t) {
                if (!e.is_string())
                    throw InputError(lc + ".targets", show(e), "module names must be strings");
                c.lora.targets.push_back(e.get<std::string>());
            }
        }
        if (l.contains("double_quant") && l.at("double_quant").is_boolean())
            c.lora.doubleQuant = l.at("double_quant").get<bool>();
    }
    c.validate();
    return c;
}

json toJson(const Breakdown &b)
{
    json j = json::object();
    for (Category c : kAllCategories)
        j[std::string(toString(c))] = b[c];
    return j;
}

Breakdown breakdownFromJson(const json &j, const std::string &field)
{
    if (!j.is_object())
        throw InputError(field, show(j).substr(0, 40), "must be a JSON object of category: bytes");
    Breakdown b;
    for (const auto &[k, v] : j.items()) {
        const Category c = parseCategory(k, field);
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            throw InputError(field + "." + k, show(v), "must be a non-negative whole number of bytes");
        b[c] = v.get<int64_t>();
    }
    return b;
}

json toJson(const Estimate &e)
{
    json phases = json::array();
    for (const auto &p : e.phases)
        phases.push_back({{"phase", toString(p.phase)},
                          {"peak_allocated_bytes", p.peakAllocatedBytes},
                          {"peak_reserved_bytes", p.peakReservedBytes},
                          {"breakdown", toJson(p.atPeak)}});
    return {{"tokens", e.tokens},
            {"parameters",
             {{"total", e.params.total},
              {"trainable", e.params.trainable},
              {"weight_bytes", e.params.weightBytes},
              {"gradient_bytes", e.params.gradientBytes},
              {"optimizer_state_bytes", e.params.optimizerStateBytes},
              {"paged_optimizer_state_bytes", e.params.pagedOptimizerStateBytes}}},
            {"peak",
             {{"phase", toString(e.peakPhase)},
              {"allocated_bytes", e.peakAllocatedBytes},
              {"reserved_bytes", e.peakReservedBytes},
              {"device_total_bytes", e.deviceTotalBytes}}},
            {"breakdown", toJson(e.peak)},
            {"phases", phases},
            {"notes", e.notes}};
}

json toJson(const Verdict &v, const GpuSpec &gpu)
{
    return {{"gpu", gpu.id},
            {"gpu_name", gpu.name},
            {"status", toString(v.fit)},
            {"capacity_bytes", v.capacityBytes},
            {"usable_bytes", v.usableBytes},
            {"needed_bytes", v.neededBytes},
            {"reserve", v.reserve},
            {"headroom_bytes", v.headroomBytes()},
            {"headroom_fraction", v.headroomFraction()},
            {"cache_flushes", v.cacheFlushes}};
}

json toJson(const Recommendation &r)
{
    return {{"group", toString(r.group)},     {"id", r.id},
            {"title", r.title},               {"cost", r.cost},
            {"saving_bytes", r.savingBytes},  {"fits_after", r.fitsAfter},
            {"config", toJson(r.config)}};
}

json estimateDocument(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                      double reserve, const std::vector<Recommendation> &recs, const EstimatorOptions &opt)
{
    json doc = toJson(e);
    doc["schema_version"] = kSchemaVersion;
    doc["model"] = {{"id", m.id}, {"name", m.name}, {"parameters", e.params.total}};
    doc["config"] = toJson(c);
    doc["verdict"] = toJson(judge(m, c, e, gpu, reserve, opt), gpu);
    doc["card_notes"] = cardNotes(m, c, e, gpu, reserve, opt);
    json r = json::array();
    for (const auto &rec : recs)
        r.push_back(toJson(rec));
    doc["recommendations"] = r;
    return doc;
}

} // namespace headroom
