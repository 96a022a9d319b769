#include "headroom/config_json.h"

#include "headroom/error.h"
#include "headroom/json_input.h"

namespace headroom {

using nlohmann::json;

json toJson(const TrainingConfig &c, bool everyField)
{
    json j = {{"precision", toString(c.precision)},
              {"optimizer", toString(c.optimizer)},
              {"optimizer_impl", toString(c.optimizerImpl)},
              {"finetune", toString(c.finetune)},
              {"lora",
               {{"rank", c.lora.rank},
                {"alpha", c.lora.alpha},
                {"dropout", c.lora.dropout},
                {"targets", c.lora.targets},
                {"double_quant", c.lora.doubleQuant}}},
              {"micro_batch", c.microBatch},
              {"seq_len", c.seqLen},
              {"grad_accum", c.gradAccum},
              {"grad_checkpointing", c.gradCheckpointing},
              {"attention", toString(c.attention)},
              {"world_size", c.worldSize},
              {"zero_stage", c.zeroStage},
              {"offload_optimizer", c.offloadOptimizer}};
    // written only when set: documents from before stay byte-identical
    if (everyField || c.loss != Loss::Standard)
        j["loss"] = toString(c.loss);
    if (everyField || c.checkpointLayers > 0)
        j["checkpoint_layers"] = c.checkpointLayers;
    if (everyField || c.checkpointEvery > 1)
        j["checkpoint_every"] = c.checkpointEvery;
    if (everyField || c.activationOffload)
        j["activation_offload"] = c.activationOffload;
    if (everyField || c.mode != TrainingMode::SFT)
        j["mode"] = toString(c.mode);
    if (hasPreferenceBlock(c.mode)) { // issue 29: under the mode's name; ORPO has no reference
        json block = {{"prompt_len", c.dpo.prompt(c.seqLen)}, {"beta", c.dpo.beta}};
        if (c.mode != TrainingMode::ORPO)
            block["reference"] = toString(c.dpo.reference);
        else if (!c.dpo.chosenNll) // SimPO: TRL's CPOTrainer with cpo_alpha 0, as the engine runs it
            block.update({{"trainer", "cpo"}, {"cpo_alpha", 0.0}, {"loss_type", "simpo"}});
        if (c.mode == TrainingMode::GRPO) {
            block["num_generations"] = c.grpo.numGenerations;
            block["temperature"] = c.grpo.temperature;
            if (c.grpo.vllm)
                block["vllm"] = {{"mode", c.grpo.vllmServer ? "server" : "colocate"},
                                 {"gpu_memory_utilization", c.grpo.vllmGpuMemoryUtilization}};
        }
        j[std::string(toString(c.mode))] = block;
    }
    if (!c.vision.isDefault()) // issue 30: only a vision-language step has the block
        j["vision"] = visionJson(c.vision);
    return j;
}

json visionJson(const TrainingConfig::Vision &v)
{
    return {{"images", v.images},
            {"image_size", {v.imageHeight, v.imageWidth}},
            {"max_pixels", v.maxPixels},
            {"min_pixels", v.minPixels},
            {"videos", v.videos},
            {"video_frames", v.videoFrames},
            {"video_size", {v.videoHeight, v.videoWidth}},
            {"video_max_pixels", v.videoMaxPixels},
            {"video_min_pixels", v.videoMinPixels},
            {"train_vision_tower", v.trainTower},
            {"train_projector", v.trainProjector},
            {"train_language_model", v.trainLanguage}};
}

// Issue 30: the vision block; what it does not say keeps its default.
static void readVision(TrainingConfig::Vision &v, const json &d, const std::string &ctx)
{
    if (!d.is_object())
        throw InputError(ctx, showJson(d).substr(0, 40), "must be a JSON object");
    using V = TrainingConfig::Vision;
    constexpr int64_t side = V::kMaxSide, pixels = V::kMaxPixels;
    auto integer = [&](const char *key, int64_t &into, int64_t lo, int64_t hi) {
        if (d.contains(key))
            into = requireInt64(d, key, ctx, lo, hi);
    };
    auto size = [&](const char *key, int64_t &h, int64_t &w) {
        if (!d.contains(key))
            return;
        const json &s = d.at(key);
        if (!s.is_array() || s.size() != 2)
            throw InputError(ctx + "." + key, showJson(s).substr(0, 40), "must be [height, width] in pixels");
        json hw = {{"height", s[0]}, {"width", s[1]}};
        h = requireInt64(hw, "height", ctx + "." + key, 1, side);
        w = requireInt64(hw, "width", ctx + "." + key, 1, side);
    };
    auto flag = [&](const char *key, bool &into) {
        if (!d.contains(key))
            return;
        if (!d.at(key).is_boolean())
            throw InputError(ctx + "." + key, showJson(d.at(key)), "must be true or false");
        into = d.at(key).get<bool>();
    };
    integer("images", v.images, 0, V::kMaxImages);
    size("image_size", v.imageHeight, v.imageWidth);
    integer("max_pixels", v.maxPixels, 0, pixels);
    integer("min_pixels", v.minPixels, 0, pixels);
    integer("videos", v.videos, 0, V::kMaxVideos);
    integer("video_frames", v.videoFrames, 0, V::kMaxFrames);
    size("video_size", v.videoHeight, v.videoWidth);
    integer("video_max_pixels", v.videoMaxPixels, 0, pixels);
    integer("video_min_pixels", v.videoMinPixels, 0, pixels);
    flag("train_vision_tower", v.trainTower);
    flag("train_projector", v.trainProjector);
    flag("train_language_model", v.trainLanguage);
}

// Issue 29: GRPO's own keys in its block (num_generations, temperature, vllm).
static void readRollout(TrainingConfig &c, const json &d, const std::string &dc)
{
    if (d.contains("num_generations"))
        c.grpo.numGenerations = requireInt64(d, "num_generations", dc, 2, int64_t(1) << 16);
    if (d.contains("temperature")) {
        if (!d.at("temperature").is_number())
            throw InputError(dc + ".temperature", showJson(d.at("temperature")), "must be a number");
        c.grpo.temperature = d.at("temperature").get<double>();
    }
    if (d.contains("vllm")) {
        const json &v = d.at("vllm");
        const std::string vc = dc + ".vllm";
        if (!v.is_object())
            throw InputError(vc, showJson(v).substr(0, 40), "must be a JSON object");
        c.grpo.vllm = true;
        if (v.contains("mode")) {
            const json &m = v.at("mode");
            if (!m.is_string() || (m != "colocate" && m != "server"))
                throw InputError(vc + ".mode", showJson(m).substr(0, 40), "must be colocate or server");
            c.grpo.vllmServer = m == "server";
        }
        if (v.contains("gpu_memory_utilization")) {
            if (!v.at("gpu_memory_utilization").is_number())
                throw InputError(vc + ".gpu_memory_utilization", showJson(v.at("gpu_memory_utilization")),
                                 "must be a number");
            c.grpo.vllmGpuMemoryUtilization = v.at("gpu_memory_utilization").get<double>();
        }
    }
}

TrainingConfig trainingConfigFromJson(const json &j)
{
    const std::string ctx = "config";
    TrainingConfig c;
    auto str = [&](const char *key) -> std::string {
        const json &v = requireField(j, key, ctx);
        if (!v.is_string())
            throw InputError(ctx + "." + key, showJson(v), "must be a string");
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
        c.gradAccum = requireInt64(j, "grad_accum", ctx, 1, kMaxGradAccum);
    if (j.contains("grad_checkpointing")) {
        if (!j.at("grad_checkpointing").is_boolean())
            throw InputError(ctx + ".grad_checkpointing", showJson(j.at("grad_checkpointing")),
                             "must be true or false");
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
            throw InputError(ctx + ".offload_optimizer", showJson(j.at("offload_optimizer")), "must be true or false");
        c.offloadOptimizer = j.at("offload_optimizer").get<bool>();
    }
    if (j.contains("activation_offload")) {
        if (!j.at("activation_offload").is_boolean())
            throw InputError(ctx + ".activation_offload", showJson(j.at("activation_offload")),
                             "must be true or false");
        c.activationOffload = j.at("activation_offload").get<bool>();
    }
    if (j.contains("mode"))
        c.mode = parseTrainingMode(str("mode"), ctx + ".mode");
    // Issue 29: the preference block, under the mode's name (dpo, kto, orpo)
    const std::string blockName(toString(c.mode));
    // TRL's defaults where the block does not say (TrainingConfig::defaultBeta, defaultReference)
    if (c.mode == TrainingMode::GRPO)
        c.dpo.beta = TrainingConfig::defaultBeta(c.mode);
    std::optional<Reference> reference;
    if (hasPreferenceBlock(c.mode) && j.contains(blockName)) {
        const json &d = j.at(blockName);
        const std::string dc = ctx + "." + blockName;
        if (!d.is_object())
            throw InputError(dc, showJson(d).substr(0, 40), "must be a JSON object");
        if (d.contains("reference")) {
            if (!d.at("reference").is_string())
                throw InputError(dc + ".reference", showJson(d.at("reference")), "must be adapter, copy or none");
            reference = parseReference(d.at("reference").get<std::string>(), dc + ".reference");
        }
        if (d.contains("prompt_len"))
            c.dpo.promptLen = requireInt64(d, "prompt_len", dc, 0, 1 << 24);
        if (d.contains("beta")) {
            if (!d.at("beta").is_number())
                throw InputError(dc + ".beta", showJson(d.at("beta")), "must be a number");
            c.dpo.beta = d.at("beta").get<double>();
        }
        if (c.mode == TrainingMode::GRPO)
            readRollout(c, d, dc);
        if (c.mode == TrainingMode::ORPO && d.contains("cpo_alpha")) { // CPO / SimPO (TRL's CPOTrainer)
            if (!d.at("cpo_alpha").is_number() || d.at("cpo_alpha").get<double>() < 0)
                throw InputError(dc + ".cpo_alpha", showJson(d.at("cpo_alpha")).substr(0, 40), "must be a number, 0 or more");
            c.dpo.chosenNll = d.at("cpo_alpha").get<double>() > 0;
        }
    }
    c.dpo.reference = reference ? *reference : c.defaultReference();
    if (c.mode == TrainingMode::ORPO)
        c.dpo.reference = Reference::None; // ORPO has no reference model
    if (j.contains("vision") && !j.at("vision").is_null())
        readVision(c.vision, j.at("vision"), ctx + ".vision");
    if (j.contains("lora")) {
        const json &l = j.at("lora");
        const std::string lc = ctx + ".lora";
        if (!l.is_object())
            throw InputError(lc, showJson(l).substr(0, 40), "must be a JSON object");
        if (l.contains("rank"))
            c.lora.rank = static_cast<int>(requireInt64(l, "rank", lc, 1, 1 << 16));
        if (l.contains("alpha")) {
            if (!l.at("alpha").is_number())
                throw InputError(lc + ".alpha", showJson(l.at("alpha")), "must be a number");
            c.lora.alpha = l.at("alpha").get<double>();
        }
        if (l.contains("dropout")) {
            if (!l.at("dropout").is_number())
                throw InputError(lc + ".dropout", showJson(l.at("dropout")), "must be a number");
            c.lora.dropout = l.at("dropout").get<double>();
        }
        if (l.contains("targets")) {
            const json &t = l.at("targets");
            if (!t.is_array())
                throw InputError(lc + ".targets", showJson(t).substr(0, 40), "must be an array of module names");
            c.lora.targets.clear();
            for (const auto &e : t) {
                if (!e.is_string())
                    throw InputError(lc + ".targets", showJson(e), "module names must be strings");
                c.lora.targets.push_back(e.get<std::string>());
            }
        }
        if (l.contains("double_quant") && l.at("double_quant").is_boolean())
            c.lora.doubleQuant = l.at("double_quant").get<bool>();
    }
    c.validate();
    return c;
}

} // namespace headroom
