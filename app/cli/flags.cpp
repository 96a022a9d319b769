// The training flags (flags.h): parsing, --from imports and the budget they resolve to.
#include "flags.h"

#include "headroom/budget.h"
#include "headroom/catalog.h"
#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/hub.h"
#include "headroom/training_formats.h"
#include "headroom/vision.h"

#include "hubfetch.h"
#include "say.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>

using namespace headroom;

namespace headroom::cli {

int64_t parseInteger(const std::string &flag, const std::string &text, int64_t lo, int64_t hi)
{
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || *end != '\0')
        throw InputError(flag, text, "must be a whole number");
    if (errno == ERANGE || v < lo || v > hi)
        throw InputError(flag, text, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return v;
}

double parseFraction(const std::string &flag, const std::string &text)
{
    char *end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end == text.c_str() || *end != '\0')
        throw InputError(flag, text, "must be a number");
    if (!(v >= 0.0 && v < 1.0))
        throw InputError(flag, text, flag == "--lora-dropout" ? "must be in [0, 1), e.g. 0.05"
                                     : flag == "--vllm-share" ? "must be in (0, 1): vLLM's gpu_memory_utilization, e.g. 0.3"
                                                              : "must be in [0, 1), e.g. 0.10 for a 10% reserve");
    return v;
}

namespace {

// Whether the command line itself gave this flag (not an imported file, not its default).
bool givenOnCommandLine(const Flags &f, const char *flag)
{
    return f.cmd != nullptr && f.cmd->count(flag) > 0;
}

std::vector<std::string> splitList(const std::string &s)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ','))
        if (!item.empty())
            out.push_back(item);
    return out;
}

} // namespace

std::vector<int64_t> parseIntegerList(const std::string &flag, const std::string &text, int64_t lo, int64_t hi)
{
    std::vector<int64_t> v;
    for (const auto &item : splitList(text))
        v.push_back(parseInteger(flag, item, lo, hi));
    if (v.empty())
        throw InputError(flag, text, "needs at least one value");
    return v;
}

namespace {

// "HxW" (or one number for a square) in pixels.
std::pair<int64_t, int64_t> parseSize(const std::string &flag, const std::string &text)
{
    const auto x = text.find('x');
    try {
        if (x == std::string::npos) {
            const int64_t side = parseInteger(flag, text, 1, TrainingConfig::Vision::kMaxSide);
            return {side, side};
        }
        return {parseInteger(flag, text.substr(0, x), 1, TrainingConfig::Vision::kMaxSide),
                parseInteger(flag, text.substr(x + 1), 1, TrainingConfig::Vision::kMaxSide)};
    } catch (const InputError &) {
        throw InputError(flag, text, "must be HxW in pixels (e.g. 448x448), each side 1 to 32768");
    }
}

TrainingConfig::Vision buildVision(const Flags &f)
{
    TrainingConfig::Vision v;
    constexpr int64_t pixels = TrainingConfig::Vision::kMaxPixels;
    v.images = parseInteger("--images", f.images, 0, TrainingConfig::Vision::kMaxImages);
    std::tie(v.imageHeight, v.imageWidth) = parseSize("--image-size", f.imageSize);
    v.maxPixels = parseInteger("--max-pixels", f.maxPixels, 0, pixels);
    v.minPixels = parseInteger("--min-pixels", f.minPixels, 0, pixels);
    v.videos = parseInteger("--videos", f.videos, 0, TrainingConfig::Vision::kMaxVideos);
    v.videoFrames = parseInteger("--video-frames", f.videoFrames, 0, TrainingConfig::Vision::kMaxFrames);
    std::tie(v.videoHeight, v.videoWidth) = parseSize("--video-size", f.videoSize);
    v.videoMaxPixels = parseInteger("--video-max-pixels", f.videoMaxPixels, 0, pixels);
    v.videoMinPixels = parseInteger("--video-min-pixels", f.videoMinPixels, 0, pixels);
    std::tie(v.trainTower, v.trainProjector, v.trainLanguage) =
        std::tuple{f.trainVisionTower, f.trainProjector, !f.freezeLanguageModel};
    return v;
}

} // namespace

TrainingConfig buildConfig(const Flags &f, bool listsAllowed)
{
    TrainingConfig c;
    c.precision = parsePrecision(f.precision, "--precision");
    c.optimizer = parseOptimizer(f.optimizer, "--optimizer");
    c.optimizerImpl = parseOptimizerImpl(f.optimizerImpl, "--optimizer-impl");
    c.finetune = parseFineTune(f.finetune, "--finetune");
    c.lora.rank = static_cast<int>(parseInteger("--lora-rank", f.loraRank, 1, 65536));
    c.lora.alpha = 2.0 * c.lora.rank;
    if (!f.loraAlpha.empty()) {
        char *end = nullptr;
        const double a = std::strtod(f.loraAlpha.c_str(), &end);
        if (end == f.loraAlpha.c_str() || *end != '\0' || !(a > 0.0 && a < 1e6))
            throw InputError("--lora-alpha", f.loraAlpha, "must be a positive number");
        c.lora.alpha = a;
    }
    c.lora.dropout = parseFraction("--lora-dropout", f.loraDropout);
    if (!f.loraTargets.empty())
        c.lora.targets = splitList(f.loraTargets);
    c.lora.doubleQuant = !f.noDoubleQuant;
    c.microBatch = listsAllowed ? parseIntegerList("--batch", f.batch, 1, 1 << 20).front()
                                : parseInteger("--batch", f.batch, 1, 1 << 20);
    c.seqLen = listsAllowed ? parseIntegerList("--seq", f.seq, 1, 1 << 24).front()
                            : parseInteger("--seq", f.seq, 1, 1 << 24);
    c.gradAccum = parseInteger("--grad-accum", f.gradAccum, 1, kMaxGradAccum);
    c.gradCheckpointing = f.gradCheckpointing;
    c.checkpointLayers = parseInteger("--checkpoint-layers", f.checkpointLayers, 0, 1 << 20);
    if (c.checkpointLayers > 0)
        c.gradCheckpointing = true;
    c.checkpointEvery = parseInteger("--checkpoint-every", f.checkpointEvery, 0, 1 << 20);
    if (c.checkpointEvery > 1)
        c.gradCheckpointing = true;
    c.offloadOptimizer = f.offloadOptimizer;
    c.activationOffload = f.activationOffload;
    c.attention = parseAttention(f.attention, "--attention");
    c.loss = parseLoss(f.loss, "--loss");
    c.mode = parseTrainingMode(f.mode, "--mode");
    c.dpo.promptLen = parseInteger("--prompt-len", f.promptLen, 0, 1 << 24);
    c.dpo.beta = TrainingConfig::defaultBeta(c.mode);
    if (!f.dpoBeta.empty()) {
        char *end = nullptr;
        c.dpo.beta = std::strtod(f.dpoBeta.c_str(), &end);
        if (end == f.dpoBeta.c_str() || *end != '\0' || !(c.dpo.beta >= 0.0 && c.dpo.beta <= 1e6))
            throw InputError("--dpo-beta", f.dpoBeta, "must be a number in [0, 1e6]");
    }
    c.dpo.reference = !f.dpoReference.empty() ? parseReference(f.dpoReference, "--dpo-reference") : c.defaultReference();
    if (!f.cpoAlpha.empty()) { // CPO and SimPO: TRL's CPOTrainer runs ORPO's step
        char *end = nullptr;
        const double alpha = std::strtod(f.cpoAlpha.c_str(), &end);
        if (end == f.cpoAlpha.c_str() || *end != '\0' || !(alpha >= 0.0 && alpha <= 1e6))
            throw InputError("--cpo-alpha", f.cpoAlpha, "must be a number in [0, 1e6]");
        if (c.mode != TrainingMode::ORPO)
            throw InputError("--cpo-alpha", f.cpoAlpha, "is CPO's (TRL's CPOTrainer runs ORPO's step): use it with --mode orpo");
        c.dpo.chosenNll = alpha > 0.0;
    }
    if (f.vllm != "off" && f.vllm != "colocate" && f.vllm != "server")
        throw InputError("--vllm", f.vllm, "must be off, colocate or server");
    c.grpo.vllm = f.vllm != "off";
    c.grpo.vllmServer = f.vllm == "server";
    c.grpo.vllmGpuMemoryUtilization = parseFraction("--vllm-share", f.vllmShare);
    c.worldSize = static_cast<int>(parseInteger("--gpus", f.gpus, 1, 65536));
    c.zeroStage = static_cast<int>(parseInteger("--zero", f.zero, 0, 3));
    c.grpo.numGenerations = f.numGenerations.empty() ? c.fittingGenerations()
                                                     : parseInteger("--num-generations", f.numGenerations, 1, int64_t(1) << 16);
    c.vision = buildVision(f);
    if (c.finetune == FineTune::QLoRA && c.precision == Precision::FP32)
        throw InputError("--precision", "fp32", "QLoRA computes in 16 bits: use bf16, fp16 or amp-bf16");
    c.validate();
    return c;
}

namespace {
std::string joinKeys(const std::vector<std::string> &keys)
{
    std::string out;
    for (const auto &k : keys)
        out += (out.empty() ? "" : ", ") + k;
    return out;
}
} // namespace

// --from: the training configs' settings become the flags' values, except for flags given on
// the command line, which win. What the files hold that Headroom did not use is said on stderr.
Flags withImports(Flags f)
{
    if (f.from.empty())
        return f;
    std::optional<TrainingFormat> format;
    if (!f.fromFormat.empty())
        format = parseTrainingFormat(f.fromFormat, "--from-format");
    std::vector<TrainingImport> files;
    for (const auto &path : f.from)
        files.push_back(importTrainingConfigFile(path, format));
    const TrainingImport m = mergeImports(files);
    auto say = [](const std::string &what) { cli::say(stderr, "headroom-cli: note: ", what); };
    // What each file was read as, for the estimate's header (stdout: an error stays one line).
    f.importedFrom.clear();
    for (size_t i = 0; i < files.size(); ++i)
        f.importedFrom += (i ? "; " : "") + f.from[i] + " as " + std::string(describe(files[i].format)) +
                          (format ? "" : " (detected)");
    if (!m.unknownKeys.empty())
        say("not understood, so not used (they may change memory; the estimate does not follow them): " +
            joinKeys(m.unknownKeys));
    if (!m.neutralKeys.empty())
        say("not used, and no effect on memory (data, logging, schedule): " + joinKeys(m.neutralKeys));
    for (const auto &c : m.conflicts)
        say("conflict: " + c);
    for (const auto &n : m.notes)
        say(n);
    auto given = [&](const char *flag) { return givenOnCommandLine(f, flag); };
    if (m.shardsWithoutGpuCount && !given("--gpus"))
        say("the files shard (ZeRO-" + std::to_string(*m.settings.zeroStage) +
            ") but do not say over how many GPUs: set --gpus");
    const TrainingSettings &st = m.settings;
    auto take = [&](const char *flag, std::string &into, const std::string &value) {
        if (!given(flag))
            into = value;
        else if (into != value)
            say(std::string(flag) + " " + into + " from the command line replaces the file's " + value);
    };
    if (st.model) {
        // A local path named by the file: a model folder or a config.json, never any other file
        // (issue 32, row 9); a Hub id or a preset goes on as it is.
        std::string named = *st.model;
        std::error_code ec;
        if (!given("--model") && (std::filesystem::exists(named, ec) || std::filesystem::is_symlink(named, ec)))
            named = recipeModelConfigPath(named, "base_model");
        take("--model", f.model, named);
    }
    if (st.precision)
        take("--precision", f.precision, std::string(toString(*st.precision)));
    if (st.optimizer)
        take("--optimizer", f.optimizer, std::string(toString(*st.optimizer)));
    if (st.optimizerImpl)
        take("--optimizer-impl", f.optimizerImpl, std::string(toString(*st.optimizerImpl)));
    if (st.finetune)
        take("--finetune", f.finetune, std::string(toString(*st.finetune)));
    if (st.loraRank)
        take("--lora-rank", f.loraRank, std::to_string(*st.loraRank));
    if (st.loraAlpha)
        take("--lora-alpha", f.loraAlpha, formatSetting(*st.loraAlpha));
    if (st.loraDropout)
        take("--lora-dropout", f.loraDropout, formatSetting(*st.loraDropout));
    if (st.loraTargets) {
        std::string t;
        for (const auto &x : *st.loraTargets)
            t += (t.empty() ? "" : ",") + x;
        take("--lora-targets", f.loraTargets, t);
    }
    if (st.microBatch)
        take("--batch", f.batch, std::to_string(*st.microBatch));
    if (st.seqLen)
        take("--seq", f.seq, std::to_string(*st.seqLen));
    if (st.gradAccum)
        take("--grad-accum", f.gradAccum, std::to_string(*st.gradAccum));
    if (st.gradCheckpointing && !given("--grad-checkpointing")) {
        f.gradCheckpointing = *st.gradCheckpointing;
        f.checkpointingList = *st.gradCheckpointing ? "on" : "off";
    }
    f.wholeCheckpoint = f.wholeCheckpoint || st.wholeCheckpoint;
    if (st.attention) {
        take("--attention", f.attention, std::string(toString(*st.attention)));
        f.attentionImported = true;
    }
    if (st.loss)
        take("--loss", f.loss, std::string(toString(*st.loss)));
    if (st.mode)
        take("--mode", f.mode, std::string(toString(*st.mode)));
    if (st.reference)
        take("--dpo-reference", f.dpoReference, std::string(toString(*st.reference)));
    if (st.promptLen)
        take("--prompt-len", f.promptLen, std::to_string(*st.promptLen));
    if (st.beta)
        take("--dpo-beta", f.dpoBeta, formatSetting(*st.beta));
    if (st.chosenNll)
        take("--cpo-alpha", f.cpoAlpha, *st.chosenNll ? "1" : "0");
    if (st.mode == TrainingMode::GRPO) { // the sequence is the prompt, then the completion
        const int64_t prompt = st.promptLen.value_or(TrainingSettings::kGrpoPromptTokens);
        if (st.completionLen) {
            take("--prompt-len", f.promptLen, std::to_string(prompt));
            take("--seq", f.seq, std::to_string(checkedAdd(prompt, *st.completionLen)));
        }
        if (st.numGenerations)
            take("--num-generations", f.numGenerations, std::to_string(*st.numGenerations));
        if (st.vllm)
            take("--vllm", f.vllm, !*st.vllm ? "off" : st.vllmServer.value_or(false) ? "server" : "colocate");
        if (st.vllmGpuMemoryUtilization)
            take("--vllm-share", f.vllmShare, formatSetting(*st.vllmGpuMemoryUtilization));
    }
    for (const auto &[flag, into, value] : {std::tuple{"--max-pixels", &f.maxPixels, st.imageMaxPixels}, // issue 30
                                            {"--min-pixels", &f.minPixels, st.imageMinPixels},
                                            {"--video-max-pixels", &f.videoMaxPixels, st.videoMaxPixels},
                                            {"--video-min-pixels", &f.videoMinPixels, st.videoMinPixels}})
        if (value)
            take(flag, *into, std::to_string(*value));
    for (const auto &[flag, into, value, negated] :
         {std::tuple{"--train-vision-tower", &f.trainVisionTower, st.freezeVisionTower, true},
          {"--train-projector", &f.trainProjector, st.freezeProjector, true},
          {"--freeze-language-model", &f.freezeLanguageModel, st.freezeLanguageModel, false},
          {"--offload-optimizer", &f.offloadOptimizer, st.offloadOptimizer, false},
          {"--activation-offload", &f.activationOffload, st.activationOffload, false},
          {"--no-double-quant", &f.noDoubleQuant, st.doubleQuant, true}})
        if (value && !given(flag))
            *into = negated ? !*value : *value;
    if (st.worldSize)
        take("--gpus", f.gpus, std::to_string(*st.worldSize));
    if (st.zeroStage)
        take("--zero", f.zero, std::to_string(*st.zeroStage));
    // What neither the files nor the command line state is Headroom's default, said; a model is
    // never assumed (a DeepSpeed or accelerate file alone names none).
    if (!st.model && !given("--model")) {
        std::string kinds;
        for (const auto &file : files)
            kinds += (kinds.empty() ? "" : ", ") + std::string(describe(file.format));
        throw InputError("--from", f.from.front(), "names no model (" + kinds + "): give --model");
    }
    std::string assumed;
    auto assume = [&](bool stated, const char *flag, const std::string &what) {
        if (!stated && !given(flag))
            assumed += (assumed.empty() ? "" : ", ") + what;
    };
    assume(st.microBatch.has_value(), "--batch", "micro batch " + f.batch);
    assume(st.seqLen.has_value(), "--seq", "sequence " + f.seq);
    assume(st.worldSize.has_value() || m.shardsWithoutGpuCount, "--gpus", f.gpus + " GPU" + (f.gpus == "1" ? "" : "s"));
    if (!assumed.empty()) // with the header, on stdout: an error after it stays one line
        f.importedFrom += "; not stated, so Headroom's defaults: " + assumed;
    f.from.clear(); // applied: passing these flags on neither reads the files nor says the notes again
    return f;
}

// A preset id, a config.json, or a Hugging Face model id (the local cache first, then the Hub).
// The Hub's notes (the parameter cross-check) go to stderr, so --json output stays one document.
ModelArch resolveModelFlag(const std::string &text, const std::string &flag)
{
    std::error_code ec;
    if (!std::filesystem::exists(text, ec) && hub::looksLikeHubId(text)) {
        const hub::Resolved r = hub::resolve(text, hub::settingsFromEnvironment(), curlFetch(), flag);
        for (const auto &n : r.notes)
            cli::say(stderr, "headroom-cli: note: ", text + ": " + n);
        return r.model;
    }
    return resolveModel(text, flag);
}

Budget resolveBudget(const Flags &given, bool listsAllowed)
{
    const Flags f = withImports(given);
    Budget b{resolveModelFlag(f.model, "--model"), buildConfig(f, listsAllowed), findGpu(f.gpu, "--gpu"),
             parseFraction("--reserve", f.reserve)};
    // Note [Vision build]; taken only for the tool's loader, the recipe's data is text: no images assumed
    const bool textData = b.config.vision.isDefault();
    const auto build = takeVisionBuild(b.model, b.config, f.wholeCheckpoint);
    if (build)
        cli::say(stderr, "headroom-cli: note: ", *build);
    // No --lora-targets, and no imported file that names them: the model's own Linears (GPT-2's
    // c_attn, c_proj, c_fc; NeoX's query_key_value...), not a Llama's names.
    if (f.loraTargets.empty())
        b.config.lora.targets = defaultLoraTargets(b.model);
    const bool pixelsGiven = givenOnCommandLine(f, "--images") || givenOnCommandLine(f, "--videos");
    if (const auto note = dropVisionOfTextModel(b.model, b.config)) // issue 30: a recipe's pixel bounds
        cli::say(stderr, "headroom-cli: note: ", *note);
    else if (!f.importedFrom.empty() && !pixelsGiven && !(build && textData)) // Note [Recipe images]
        if (const auto assumed = assumeRecipeImages(b.model, b.config))
            cli::say(stderr, "headroom-cli: note: ", *assumed + " (--images, --image-size)");
    // The default sequence (2048) on a model with learned positions that stop before it: the most
    // it takes, said on stderr. A --seq given on the command line is checked as given.
    const bool seqGiven = givenOnCommandLine(f, "--seq");
    if (!seqGiven && seqLenFor(b.model, b.config.seqLen) != b.config.seqLen) {
        b.config.seqLen = seqLenFor(b.model, b.config.seqLen);
        cli::say(stderr, "headroom-cli: note: ",
                 "--seq not given: " + b.model.name + " takes at most " + std::to_string(b.config.seqLen) +
                     " positions; using " + std::to_string(b.config.seqLen));
    }
    // No --attention, and no imported file that states one, on a model whose attention runs in
    // eager only (GPT-OSS's sinks): eager, said on stderr, rather than a refusal of a default.
    const bool attentionGiven = givenOnCommandLine(f, "--attention") || f.attentionImported;
    if (!attentionGiven && attentionFor(b.model, b.config.attention) != b.config.attention) {
        b.config.attention = attentionFor(b.model, b.config.attention);
        cli::say(stderr, "headroom-cli: note: ",
                 "--attention not given: " + b.model.modelType + " runs eager attention only (its attention sinks); using eager");
    }
    return b;
}

void addTrainingFlags(CLI::App *cmd, Flags &f, bool lists)
{
    f.cmd = cmd;
    cmd->add_option("--from", f.from,
                    "Start from a training config: Axolotl or LLaMA-Factory YAML, TrainingArguments/SFTConfig, DeepSpeed "
                    "JSON, accelerate YAML (repeatable; flags given here win)");
    cmd->add_option("--from-format", f.fromFormat, "The --from files' format, instead of detecting it");
    cmd->add_option("--model", f.model, "Preset id (see `models`), a Hugging Face model id (org/name: the local cache, then the Hub; "
                                     "HF_TOKEN for gated models, HF_HUB_OFFLINE=1 for the cache only) or a config.json path")
        ->capture_default_str();
    cmd->add_option("--precision", f.precision, joinNames(precisionTable()))->capture_default_str();
    // The help lists come from core's tables (types.cpp): a new row shows up here by itself.
    cmd->add_option("--optimizer", f.optimizer, joinNames(optimizerTable()))->capture_default_str();
    cmd->add_option("--optimizer-impl", f.optimizerImpl, joinNames(optimizerImplTable()))->capture_default_str();
    cmd->add_option("--finetune", f.finetune, joinNames(fineTuneTable()))->capture_default_str();
    cmd->add_option("--lora-rank", f.loraRank, "LoRA rank")->capture_default_str();
    cmd->add_option("--lora-alpha", f.loraAlpha, "LoRA alpha (default: twice the rank)");
    cmd->add_option("--lora-dropout", f.loraDropout, "LoRA dropout probability, in [0, 1)")->capture_default_str();
    cmd->add_option("--lora-targets", f.loraTargets, "Comma-separated modules (default: every linear layer of the model, by its own names)");
    cmd->add_flag("--no-double-quant", f.noDoubleQuant, "QLoRA without bitsandbytes' double quantization of the scales");
    cmd->add_option("--batch", f.batch, lists ? "Micro-batch sizes, comma-separated" : "Micro-batch size")
        ->capture_default_str();
    cmd->add_option("--seq", f.seq, lists ? "Sequence lengths, comma-separated" : "Sequence length")
        ->capture_default_str();
    cmd->add_option("--grad-accum", f.gradAccum, "Gradient accumulation steps")->capture_default_str();
    if (lists)
        cmd->add_option("--grad-checkpointing", f.checkpointingList, "on | off | both");
    else
        cmd->add_flag("--grad-checkpointing", f.gradCheckpointing, "Checkpoint every decoder layer");
    cmd->add_option("--checkpoint-layers", f.checkpointLayers,
                    "Checkpoint only the first N decoder layers (selective checkpointing; implies --grad-checkpointing; 0: all)")
        ->capture_default_str();
    cmd->add_option("--checkpoint-every", f.checkpointEvery,
                    "Checkpoint only every k-th decoder layer (0, k, 2k, ...; implies --grad-checkpointing; 0: all)")
        ->capture_default_str();
    cmd->add_flag("--offload-optimizer", f.offloadOptimizer, "Optimizer state and step on the CPU (ZeRO-Offload)");
    cmd->add_flag("--activation-offload", f.activationOffload,
                  "Saved activations to pinned host memory in forward, back in backward (torch save_on_cpu)");
    cmd->add_option("--attention", f.attention, joinNames(attentionTable()))->capture_default_str();
    cmd->add_option("--loss", f.loss, "standard | fused (linear cross-entropy that never materializes the logits, as Liger's)")
        ->capture_default_str();
    cmd->add_option("--mode", f.mode,
                    "sft | dpo | reward | kto | orpo | grpo (DPO as TRL runs it: --batch pairs, i.e. 2x the sequences, "
                    "against a reference; reward: TRL's reward model, pairs through a one-label score head; kto, "
                    "orpo: TRL's steps; grpo: TRL's GRPOTrainer, --batch x --grad-accum completions generated a "
                    "step, --seq the prompt then the completion)")
        ->capture_default_str();
    cmd->add_option("--dpo-reference", f.dpoReference,
                    "adapter | copy | none: the policy with its adapter disabled, a frozen copy, or precomputed "
                    "log-probs (default: adapter with LoRA, copy in full fine-tuning)");
    cmd->add_option("--prompt-len", f.promptLen, "DPO: prompt tokens of each sequence (0: half of --seq)")
        ->capture_default_str();
    cmd->add_option("--dpo-beta", f.dpoBeta, "The preference modes' beta (default 0.1; GRPO: 0, no reference)");
    cmd->add_option("--cpo-alpha", f.cpoAlpha,
                    "CPO and SimPO (TRL's CPOTrainer: --mode orpo's step): the chosen half's cross-entropy weight; "
                    "0 leaves it out (SimPO)");
    cmd->add_option("--vllm", f.vllm, "GRPO's generation: off (HF generate) | colocate | server (TRL's use_vllm)")
        ->capture_default_str();
    cmd->add_option("--vllm-share", f.vllmShare, "GRPO with vLLM colocated: its gpu_memory_utilization")
        ->capture_default_str();
    cmd->add_option("--num-generations", f.numGenerations,
                    "GRPO: completions a prompt (divides --batch x --grad-accum x --gpus; default: TRL's 8, or "
                    "the most below it that divide; --seq is the prompt, then the completion)");
    for (const auto &[flag, into, help] : std::initializer_list<std::tuple<const char *, std::string *, const char *>>{
             {"--images", &f.images, "Vision-language: images per sample"},
             {"--image-size", &f.imageSize, "Their size in pixels, HxW, before the processor"},
             {"--max-pixels", &f.maxPixels, "The recipe's image bound (LLaMA-Factory's image_max_pixels; 0: none)"},
             {"--min-pixels", &f.minPixels, "... and lower bound (image_min_pixels; 0: none)"},
             {"--videos", &f.videos, "Vision-language: videos per sample"},
             {"--video-frames", &f.videoFrames, "Frames sampled from each video"},
             {"--video-size", &f.videoSize, "Their frames' size in pixels, HxW"},
             {"--video-max-pixels", &f.videoMaxPixels, "The recipe's frame bound (video_max_pixels; 0: none)"},
             {"--video-min-pixels", &f.videoMinPixels, "... and lower bound (video_min_pixels; 0: none)"}})
        cmd->add_option(flag, *into, help)->capture_default_str();
    cmd->add_flag("--train-vision-tower", f.trainVisionTower, "Train the vision tower too (frozen by default)");
    cmd->add_flag("--train-projector", f.trainProjector, "Train the multimodal projector too (frozen by default)");
    cmd->add_flag("--freeze-language-model", f.freezeLanguageModel, "Keep the language model frozen");
    cmd->add_option("--gpus", f.gpus, "Data-parallel world size")->capture_default_str();
    cmd->add_option("--zero", f.zero, "ZeRO stage 0..3 (3 = FSDP full shard)")->capture_default_str();
    cmd->add_option("--gpu", f.gpu, "GPU catalog id (see `gpus`)")->capture_default_str();
    cmd->add_option("--reserve", f.reserve, "Fraction of the card kept in reserve")->capture_default_str();
    cmd->add_option("--alloc-conf", f.allocConf, "PYTORCH_CUDA_ALLOC_CONF the run uses (e.g. expandable_segments:True)");
}

EstimatorOptions optionsFor(const Flags &f)
{
    EstimatorOptions o;
    o.allocator = parseAllocConf(f.allocConf, "--alloc-conf");
    return o;
}

// The model as a training config names it: a preset's Hugging Face id, else what was given.
std::string modelNameForExport(const std::string &text)
{
    if (text.find('/') == std::string::npos && text.find(".json") == std::string::npos) {
        const ModelArch &m = findModelPreset(text, "--model");
        return m.source.empty() ? m.id : m.source;
    }
    return text;
}

} // namespace headroom::cli
