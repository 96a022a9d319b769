// Training configs in and out (headroom/training_formats.h): each format is one file in
// io/formats/ (format.h); here, the registry and what is the same for every format.

#include "headroom/training_formats.h"

#include "format.h"

#include "headroom/error.h"
#include "headroom/files.h"

#include <fstream>

namespace headroom {

namespace formats {

const std::vector<const Format *> &allFormats()
{
    static const std::vector<const Format *> all = [] {
        std::vector<const Format *> v = {
#define HEADROOM_FORMAT(name) &format_##name(),
#include "formats.inc"
#undef HEADROOM_FORMAT
        };
        std::sort(v.begin(), v.end(), [](const Format *a, const Format *b) { return a->id < b->id; });
        return v;
    }();
    return all;
}

const Format &format(TrainingFormat id)
{
    for (const Format *f : allFormats())
        if (f->id == id)
            return *f;
    throw std::logic_error("a TrainingFormat without its file in core/io/formats/");
}

namespace {
std::optional<TrainingFormat> detect(const json &j)
{
    std::vector<const Format *> order = allFormats();
    std::sort(order.begin(), order.end(), [](const Format *a, const Format *b) { return a->detectOrder < b->detectOrder; });
    for (const Format *f : order)
        if (f->detects(j))
            return f->id;
    return std::nullopt;
}
} // namespace

} // namespace formats

using formats::allFormats;
using formats::format;

std::string_view toString(TrainingFormat f) { return format(f).name; }

std::string_view describe(TrainingFormat f) { return format(f).description; }

TrainingFormat parseTrainingFormat(std::string_view s, const std::string &field)
{
    std::string names;
    const auto &all = allFormats();
    for (size_t i = 0; i < all.size(); ++i) {
        if (all[i]->name == s)
            return all[i]->id;
        names += std::string(i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i]->name);
    }
    throw InputError(field, std::string(s), "must be " + names);
}

void TrainingSettings::applyTo(TrainingConfig &c) const
{
    if (precision) c.precision = *precision;
    if (optimizer) c.optimizer = *optimizer;
    if (optimizerImpl) c.optimizerImpl = *optimizerImpl;
    if (finetune) c.finetune = *finetune;
    if (loraRank) {
        c.lora.rank = *loraRank;
        if (!loraAlpha)
            c.lora.alpha = 2.0 * *loraRank;
    }
    if (loraAlpha) c.lora.alpha = *loraAlpha;
    if (loraDropout) c.lora.dropout = *loraDropout;
    if (loraTargets) c.lora.targets = *loraTargets;
    if (doubleQuant) c.lora.doubleQuant = *doubleQuant;
    if (microBatch) c.microBatch = *microBatch;
    if (seqLen) c.seqLen = *seqLen;
    if (gradAccum) c.gradAccum = *gradAccum;
    if (gradCheckpointing) c.gradCheckpointing = *gradCheckpointing;
    if (attention) c.attention = *attention;
    if (loss) c.loss = *loss;
    if (worldSize) c.worldSize = *worldSize;
    if (zeroStage) c.zeroStage = *zeroStage;
    if (offloadOptimizer) c.offloadOptimizer = *offloadOptimizer;
    if (activationOffload) c.activationOffload = *activationOffload;
    if (mode)
        c.mode = *mode;
    if (promptLen) c.dpo.promptLen = *promptLen;
    if (beta)
        c.dpo.beta = *beta;
    else if (mode == TrainingMode::GRPO)
        c.dpo.beta = TrainingConfig::defaultBeta(*mode);
    if (mode) // TRL's reference unless the file says (TrainingConfig::defaultReference)
        c.dpo.reference = reference ? *reference : c.defaultReference();
    if (chosenNll)
        c.dpo.chosenNll = *chosenNll;
    if (mode == TrainingMode::GRPO)
        applyRollout(c);
    if (imageMaxPixels) c.vision.maxPixels = *imageMaxPixels;
    if (imageMinPixels) c.vision.minPixels = *imageMinPixels;
    if (videoMaxPixels) c.vision.videoMaxPixels = *videoMaxPixels;
    if (videoMinPixels) c.vision.videoMinPixels = *videoMinPixels;
    if (freezeVisionTower) c.vision.trainTower = !*freezeVisionTower;
    if (freezeProjector) c.vision.trainProjector = !*freezeProjector;
    if (freezeLanguageModel) c.vision.trainLanguage = !*freezeLanguageModel;
}

// GRPO: the sequence is the prompt (the file's max_prompt_length, else kGrpoPromptTokens, said by
// the import) then the completion.
void TrainingSettings::applyRollout(TrainingConfig &c) const
{
    if (completionLen) {
        c.dpo.promptLen = promptLen ? *promptLen : kGrpoPromptTokens;
        c.seqLen = checkedAdd(c.dpo.promptLen, *completionLen);
    }
    if (numGenerations) c.grpo.numGenerations = *numGenerations;
    if (temperature) c.grpo.temperature = *temperature;
    if (vllm) c.grpo.vllm = *vllm;
    if (vllmServer) c.grpo.vllmServer = *vllmServer;
    if (vllmGpuMemoryUtilization) c.grpo.vllmGpuMemoryUtilization = *vllmGpuMemoryUtilization;
}

namespace {
constexpr int64_t kTrainerMicroBatch = 8;
const char *const kTrainerMicroBatchNote =
    "per_device_train_batch_size: not stated, so the Trainer's own default: 8 samples a GPU";

// The Trainer's own default where no file states the micro-batch (TrainingArguments'
// per_device_train_batch_size, which TRL's configs and LLaMA-Factory keep): the run takes 8
// samples a GPU, and an estimate at Headroom's 1 would be under it.
void useTrainerMicroBatch(TrainingImport &imp)
{
    imp.settings.microBatch = kTrainerMicroBatch;
    imp.microBatchIsToolDefault = true;
    imp.notes.push_back(kTrainerMicroBatchNote);
}

// The same tools' other files (issue 28): LLaMA-Factory's inference, merge/export and predict-only
// configs. Refused as what they are, in one line, never
// estimated as a training step.
void refuseNonTraining(const formats::json &j, const std::string &name)
{
    if (!j.is_object())
        return;
    auto truthy = [&](const char *k) {
        if (!j.contains(k))
            return false;
        const auto &v = j.at(k);
        return (v.is_boolean() && v.get<bool>()) || (v.is_string() && (v == "true" || v == "True"));
    };
    auto refuse = [&](const char *key, const std::string &what) {
        throw InputError(name + ": " + key, showJson(j.at(key)), what + ", not a training run: nothing to estimate");
    };
    if (j.contains("export_dir"))
        refuse("export_dir", "a merge/export config");
    // LLaMA-Factory v1 nests the export under peft_config.
    if (j.contains("peft_config") && j.at("peft_config").is_object() && j.at("peft_config").contains("export_dir"))
        throw InputError(name + ": peft_config.export_dir", showJson(j.at("peft_config").at("export_dir")),
                         "a merge/export config, not a training run: nothing to estimate");
    if (j.contains("infer_backend"))
        refuse("infer_backend", "an inference config");
    if (truthy("do_predict") && !truthy("do_train"))
        refuse("do_predict", "a predict-only config");
}

// LLaMA-Factory's Megatron-Core examples (mcore_adapter, Megatron Bridge): a training run, but
// Megatron's loop, its tensor, pipeline and expert shards and its distributed optimizer, which
// Headroom does not estimate; refused in one line rather than estimated as a Trainer step.
void refuseMegatron(const formats::json &j, const std::string &name)
{
    if (!j.is_object())
        return;
    for (const char *key : {"pipeline_model_parallel_size", "tensor_model_parallel_size", "expert_model_parallel_size",
                            "use_distributed_optimizer"})
        if (j.contains(key))
            throw InputError(name + ": " + key, showJson(j.at(key)),
                             "a Megatron-Core run (LLaMA-Factory's mcore_adapter or Megatron Bridge): Headroom "
                             "estimates the Transformers Trainer's step, not Megatron's shards and optimizer");
}
} // namespace

TrainingImport importTrainingConfig(const std::string &text, const std::string &name, std::optional<TrainingFormat> format)
{
    const formats::json j = formats::parseText(text, name);
    refuseNonTraining(j, name);
    refuseMegatron(j, name);
    if (!format)
        format = formats::detect(j);
    if (!format)
        throw InputError(name, "its keys",
                         "not a training config Headroom knows (Axolotl, LLaMA-Factory, TrainingArguments/SFTConfig, "
                         "DeepSpeed, accelerate); name its format (--from-format)");
    TrainingImport out;
    out.format = *format;
    formats::Reader r{name, out};
    formats::format(*format).read(r, j);
    if (out.settings.mode == TrainingMode::GRPO && out.settings.completionLen && !out.settings.promptLen)
        r.note("max_prompt_length: not given (TRL's GRPOConfig no longer truncates prompts): prompts taken as " +
               std::to_string(TrainingSettings::kGrpoPromptTokens) + " tokens, before max_completion_length");
    // Keys and values echoed back come from the file: one line each, control characters escaped,
    // bounded (issue 32, row 7), wherever they are shown.
    for (auto *list : {&out.unknownKeys, &out.neutralKeys, &out.conflicts, &out.notes})
        for (std::string &k : *list)
            k = boundedName(k, 400);
    out.shardsWithoutGpuCount = out.settings.zeroStage.value_or(0) > 0 && !out.settings.worldSize;
    if ((out.format == TrainingFormat::Trainer || out.format == TrainingFormat::LlamaFactory) && !out.settings.microBatch)
        useTrainerMicroBatch(out);
    return out;
}

TrainingImport importTrainingConfigFile(const std::string &path, std::optional<TrainingFormat> format)
{
    // The one reader (headroom/files.h): a FIFO, a device or a folder named by --from (or by a
    // recipe) is refused before anything is read, and the size is checked first (issue 32, row 10).
    const std::string text = readRegularFile(path, "--from", formats::kMaxText);
    const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    return importTrainingConfig(text, name, format);
}

TrainingImport mergeImports(const std::vector<TrainingImport> &files)
{
    TrainingImport out;
    if (files.empty())
        return out;
    out.format = files.front().format;
    auto merge = [&](auto &into, const auto &from, const char *what, std::string_view format) {
        if (!from)
            return;
        if (into && !(*into == *from))
            out.conflicts.push_back(std::string(what) + " differs between the files; the " + std::string(format) +
                                    " file's is kept");
        into = from;
    };
    bool toolDefault = false; // a file left the micro-batch to the Trainer's own default
    for (const auto &f : files) {
        const auto fmt = describe(f.format);
        auto &a = out.settings;
        const auto &b = f.settings;
        merge(a.model, b.model, "the model", fmt);
        merge(a.precision, b.precision, "the precision", fmt);
        merge(a.optimizer, b.optimizer, "the optimizer", fmt);
        merge(a.optimizerImpl, b.optimizerImpl, "the optimizer implementation", fmt);
        merge(a.finetune, b.finetune, "the fine-tuning method", fmt);
        merge(a.loraRank, b.loraRank, "the LoRA rank", fmt);
        merge(a.loraAlpha, b.loraAlpha, "the LoRA alpha", fmt);
        merge(a.loraDropout, b.loraDropout, "the LoRA dropout", fmt);
        merge(a.loraTargets, b.loraTargets, "the LoRA targets", fmt);
        merge(a.doubleQuant, b.doubleQuant, "double quantization", fmt);
        // A file's tool default is no statement: it applies below only where no file states one.
        if (f.microBatchIsToolDefault)
            toolDefault = true;
        else
            merge(a.microBatch, b.microBatch, "the micro-batch", fmt);
        merge(a.seqLen, b.seqLen, "the sequence length", fmt);
        merge(a.gradAccum, b.gradAccum, "gradient accumulation", fmt);
        merge(a.gradCheckpointing, b.gradCheckpointing, "gradient checkpointing", fmt);
        merge(a.attention, b.attention, "the attention", fmt);
        merge(a.loss, b.loss, "the loss", fmt);
        merge(a.worldSize, b.worldSize, "the GPU count", fmt);
        merge(a.zeroStage, b.zeroStage, "the ZeRO stage", fmt);
        merge(a.offloadOptimizer, b.offloadOptimizer, "optimizer offload", fmt);
        merge(a.activationOffload, b.activationOffload, "activation offload", fmt);
        merge(a.mode, b.mode, "the training mode", fmt);
        merge(a.reference, b.reference, "the DPO reference", fmt);
        merge(a.chosenNll, b.chosenNll, "CPO's cpo_alpha", fmt);
        merge(a.promptLen, b.promptLen, "the prompt length", fmt);
        merge(a.beta, b.beta, "DPO's beta", fmt);
        merge(a.completionLen, b.completionLen, "GRPO's completion length", fmt);
        merge(a.numGenerations, b.numGenerations, "GRPO's generations per prompt", fmt);
        merge(a.temperature, b.temperature, "GRPO's temperature", fmt);
        merge(a.vllm, b.vllm, "GRPO's use_vllm", fmt);
        merge(a.vllmServer, b.vllmServer, "GRPO's vLLM mode", fmt);
        merge(a.vllmGpuMemoryUtilization, b.vllmGpuMemoryUtilization, "vLLM's GPU memory share", fmt);
        merge(a.imageMaxPixels, b.imageMaxPixels, "the image pixel bound", fmt);
        merge(a.imageMinPixels, b.imageMinPixels, "the image pixel floor", fmt);
        merge(a.videoMaxPixels, b.videoMaxPixels, "the video frame pixel bound", fmt);
        merge(a.videoMinPixels, b.videoMinPixels, "the video frame pixel floor", fmt);
        merge(a.videoMaxFrames, b.videoMaxFrames, "the video frame cap", fmt);
        merge(a.freezeVisionTower, b.freezeVisionTower, "freezing the vision tower", fmt);
        merge(a.freezeProjector, b.freezeProjector, "freezing the projector", fmt);
        merge(a.freezeLanguageModel, b.freezeLanguageModel, "freezing the language model", fmt);
        a.wholeCheckpoint = a.wholeCheckpoint || b.wholeCheckpoint;
        out.unknownKeys.insert(out.unknownKeys.end(), f.unknownKeys.begin(), f.unknownKeys.end());
        out.neutralKeys.insert(out.neutralKeys.end(), f.neutralKeys.begin(), f.neutralKeys.end());
        out.conflicts.insert(out.conflicts.end(), f.conflicts.begin(), f.conflicts.end());
        for (const std::string &n : f.notes)
            if (n != kTrainerMicroBatchNote)
                out.notes.push_back(n);
    }
    if (toolDefault && !out.settings.microBatch)
        useTrainerMicroBatch(out);
    // A ZeRO stage from one file and the GPU count from another is fine.
    out.shardsWithoutGpuCount = out.settings.zeroStage.value_or(0) > 0 && !out.settings.worldSize;
    return out;
}

std::string exportTrainingConfig(TrainingFormat format, const std::string &model, const TrainingConfig &c,
                                 std::vector<std::string> *notesOut)
{
    // What no format has a key for, said once for all of them.
    std::vector<std::string> notes;
    if (c.gradCheckpointing && c.checkpointLayers > 0)
        notes.push_back("checkpointing only the first " + std::to_string(c.checkpointLayers) +
                        " layers has no key in this format: written as gradient checkpointing of every layer (set "
                        "layer.gradient_checkpointing = False past layer " + std::to_string(c.checkpointLayers) +
                        " in your script to match the estimate)");
    if (c.gradCheckpointing && c.checkpointEvery > 1)
        notes.push_back("checkpointing every " + std::to_string(c.checkpointEvery) +
                        "th layer has no key in this format: written as gradient checkpointing of every layer (set "
                        "layer.gradient_checkpointing = False where the layer index is not a multiple of " +
                        std::to_string(c.checkpointEvery) + " in your script to match the estimate)");
    if (c.mode == TrainingMode::DPO && (format == TrainingFormat::DeepSpeed || format == TrainingFormat::Accelerate ||
                                         format == TrainingFormat::LlamaFactoryV1))
        notes.push_back("DPO has no key in this format: the training script (TRL's DPOTrainer) decides it");
    if (c.mode == TrainingMode::Reward && format != TrainingFormat::Axolotl && format != TrainingFormat::Trainer)
        notes.push_back("TRL's reward model has no key in this format (LLaMA-Factory's stage rm trains a value head "
                        "over the lm_head instead): written as supervised fine-tuning; use TRL's RewardTrainer");
    if (c.mode == TrainingMode::ORPO && !c.dpo.chosenNll && format == TrainingFormat::LlamaFactory)
        notes.push_back("SimPO as TRL's CPOTrainer runs it has no LLaMA-Factory key (its pref_loss: simpo is its own DPO "
                        "stage's loss): written as ORPO, with the chosen half's cross-entropy");
    if ((c.mode == TrainingMode::ORPO && format != TrainingFormat::Axolotl && format != TrainingFormat::LlamaFactory) ||
        ((c.mode == TrainingMode::KTO || c.mode == TrainingMode::GRPO) && format != TrainingFormat::Axolotl &&
         format != TrainingFormat::Trainer && format != TrainingFormat::LlamaFactory))
        notes.push_back(modeTitle(c.mode) + " has no key in this format: the training script (TRL's trainer) decides it");
    std::string text = formats::format(format).write(model, c, notes);
    if (notesOut)
        *notesOut = notes;
    return text;
}

} // namespace headroom
