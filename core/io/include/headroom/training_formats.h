#pragma once
// The training configs people already have, in and out: Axolotl YAML, LLaMA-Factory YAML, HF
// TrainingArguments / TRL SFTConfig (JSON or YAML), DeepSpeed JSON and accelerate config YAML.
// Import reads only what changes memory and says what it did not understand; export writes the
// scenario in the format's own keys, so an imported file re-exported gives the same settings.

#include "headroom/types.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

enum class TrainingFormat { Axolotl, LlamaFactory, Trainer, DeepSpeed, Accelerate, LlamaFactoryV1 };
inline constexpr TrainingFormat kAllTrainingFormats[] = {TrainingFormat::Axolotl, TrainingFormat::LlamaFactory,
                                                         TrainingFormat::Trainer, TrainingFormat::DeepSpeed,
                                                         TrainingFormat::Accelerate, TrainingFormat::LlamaFactoryV1};
std::string_view toString(TrainingFormat f);                    // axolotl, llamafactory, llamafactory-v1, trainer, deepspeed, accelerate
std::string_view describe(TrainingFormat f);                    // "Axolotl YAML", ...
TrainingFormat parseTrainingFormat(std::string_view s, const std::string &field);

// The settings one file makes; what it does not mention stays unset.
struct TrainingSettings
{
    std::optional<std::string> model; // base_model / model_name_or_path (a Hub id or a path)
    std::optional<Precision> precision;
    std::optional<Optimizer> optimizer;
    std::optional<OptimizerImpl> optimizerImpl;
    std::optional<FineTune> finetune;
    std::optional<int> loraRank;
    std::optional<double> loraAlpha;
    std::optional<double> loraDropout;
    std::optional<std::vector<std::string>> loraTargets;
    std::optional<bool> doubleQuant;
    std::optional<int64_t> microBatch;
    std::optional<int64_t> seqLen;
    std::optional<int64_t> gradAccum;
    std::optional<bool> gradCheckpointing;
    std::optional<Attention> attention;
    std::optional<Loss> loss;
    std::optional<int> worldSize;
    std::optional<int> zeroStage;
    std::optional<bool> offloadOptimizer;
    std::optional<bool> activationOffload;
    // Issue 29: DPO (Axolotl rl: dpo/ipo, LLaMA-Factory stage: dpo, TRL's DPOConfig)
    std::optional<TrainingMode> mode;
    std::optional<Reference> reference;
    std::optional<bool> chosenNll; // CPO / SimPO: cpo_alpha > 0 (TrainingConfig::Preference::chosenNll)
    std::optional<int64_t> promptLen;
    std::optional<double> beta;
    // GRPO (TRL's GRPOConfig, Axolotl rl: grpo and its trl: block): seqLen is prompt + completion
    std::optional<int64_t> completionLen; // max_completion_length
    std::optional<int64_t> numGenerations;
    std::optional<double> temperature;
    std::optional<bool> vllm;
    std::optional<bool> vllmServer;
    std::optional<double> vllmGpuMemoryUtilization;
    // Issue 30: a vision-language recipe's pixel bounds and what it freezes (LLaMA-Factory's
    // image_max_pixels, ..., video_maxlen, freeze_vision_tower, freeze_multi_modal_projector,
    // freeze_language_model). How many images a sample holds is the data's, never a recipe's.
    std::optional<int64_t> imageMaxPixels, imageMinPixels, videoMaxPixels, videoMinPixels, videoMaxFrames;
    std::optional<bool> freezeVisionTower, freezeProjector, freezeLanguageModel;
    // The tool loads the whole checkpoint, a vision-language one's tower too, whatever the data
    // (LLaMA-Factory's loader: AutoModelForImageTextToText for a multimodal config; Note [Vision build]).
    bool wholeCheckpoint = false;

    // Onto a configuration: the fields set here replace the config's.
    void applyTo(TrainingConfig &c) const;
    void applyRollout(TrainingConfig &c) const; // GRPO's part of applyTo
    // GRPO's prompt where a file gives only max_completion_length (TRL's GRPOConfig no longer
    // truncates prompts; 512 was its max_prompt_length default): said by the import.
    static constexpr int64_t kGrpoPromptTokens = 512;
};

struct TrainingImport
{
    TrainingFormat format = TrainingFormat::Axolotl;
    TrainingSettings settings;
    std::vector<std::string> unknownKeys; // "key" or "section.key": not understood, so not used (may change memory)
    std::vector<std::string> neutralKeys; // not read either, but known to touch only the data, logs or schedule
    std::vector<std::string> conflicts;   // settings that contradict each other, and what was kept
    std::vector<std::string> notes;       // what the estimate cannot follow (modules_to_save, 8-bit weights...)
    bool shardsWithoutGpuCount = false;   // a ZeRO stage, but no word on how many GPUs
    // The micro-batch is the tool's own default (the Trainer's per_device_train_batch_size = 8),
    // not the file's: another file that states one replaces it without a conflict.
    bool microBatchIsToolDefault = false;
};

// Detects the format from the keys (DeepSpeed's zero_optimization, accelerate's
// distributed_type, Axolotl's base_model, LLaMA-Factory's finetuning_type/stage, the Trainer's
// per_device_train_batch_size). `name` names the file in errors: "name: key = value: why".
// Text is bounded (4 MiB, depth 32, 100k nodes). Throws InputError.
TrainingImport importTrainingConfig(const std::string &text, const std::string &name,
                                    std::optional<TrainingFormat> format = std::nullopt);
TrainingImport importTrainingConfigFile(const std::string &path, std::optional<TrainingFormat> format = std::nullopt);

// Several files at once (an Axolotl YAML and the DeepSpeed JSON it names): later files fill in
// what earlier ones left unset; a field two files set differently is a conflict (the later wins).
TrainingImport mergeImports(const std::vector<TrainingImport> &files);

// The scenario in the format's keys. `notes` gets what the format cannot say exactly (e.g.
// ZeRO-1 in an accelerate FSDP config), also written as comments where the format has them.
std::string exportTrainingConfig(TrainingFormat format, const std::string &model, const TrainingConfig &c,
                                 std::vector<std::string> *notes = nullptr);

} // namespace headroom
