#pragma once
// The training flags every estimating subcommand shares: their values, the training configs they
// start from (--from), and the budget they resolve to (the model, the configuration, the card).

#include "headroom/catalog.h"
#include "headroom/config.h"
#include "headroom/estimator.h"
#include "headroom/model.h"

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

namespace headroom::cli {

struct Flags
{
    std::string model = "llama-3.1-8b";
    std::string precision = "bf16";
    std::string optimizer = "adamw";
    std::string optimizerImpl = "foreach";
    std::string finetune = "full";
    std::string loraRank = "16";
    std::string loraAlpha;
    std::string loraDropout = "0";
    std::string loraTargets;
    std::string batch = "1";
    std::string seq = "2048";
    std::string gradAccum = "1";
    bool gradCheckpointing = false;
    std::string checkpointLayers = "0";
    std::string checkpointEvery = "0";
    bool offloadOptimizer = false;
    bool activationOffload = false;
    bool noDoubleQuant = false;
    std::string checkpointingList; // sweep: on | off | both
    std::string attention = "sdpa";
    bool attentionImported = false; // an imported file states the attention
    bool wholeCheckpoint = false;   // an imported file's tool loads the whole checkpoint (Note [Vision build])
    std::string loss = "standard";
    std::string mode = "sft";
    std::string dpoReference; // empty: TRL's default (adapter with LoRA, copy in full fine-tuning)
    std::string cpoAlpha;     // empty: ORPO's and CPO's chosen cross-entropy; 0: SimPO's step without it
    std::string promptLen = "0";
    std::string dpoBeta;             // empty: TRL's default (0.1; GRPO: 0)
    std::string numGenerations;       // GRPO; empty: TrainingConfig::fittingGenerations
    std::string vllm = "off";         // GRPO's use_vllm: off | colocate | server
    std::string vllmShare = "0.3";    // vllm_gpu_memory_utilization
    // Issue 30: a vision-language step's pixels, per sample (TrainingConfig::Vision)
    std::string images = "0", imageSize = "448x448", maxPixels = "0", minPixels = "0";
    std::string videos = "0", videoFrames = "0", videoSize = "256x256", videoMaxPixels = "0", videoMinPixels = "0";
    bool trainVisionTower = false, trainProjector = false, freezeLanguageModel = false;
    std::string gpus = "1";
    std::string zero = "0";
    std::string gpu = "h100-80";
    std::string reserve = "0.10";
    std::string allocConf;
    bool json = false;
    std::string format = "markdown";
    std::vector<std::string> from; // training configs to start from (--from, repeatable)
    std::string importedFrom;      // what withImports read them as ("a.yaml as Axolotl YAML (detected)")
    std::string fromFormat;        // their format, when detection is not wanted
    CLI::App *cmd = nullptr;       // the subcommand these flags belong to: which were given
};

struct Budget
{
    ModelArch model;
    TrainingConfig config;
    GpuSpec gpu;
    double reserve = 0.1;
};

int64_t parseInteger(const std::string &flag, const std::string &text, int64_t lo, int64_t hi);
double parseFraction(const std::string &flag, const std::string &text);
std::vector<int64_t> parseIntegerList(const std::string &flag, const std::string &text, int64_t lo, int64_t hi);
TrainingConfig buildConfig(const Flags &f, bool listsAllowed);
// --from: the training configs' settings become the flags' values, except for flags given on the
// command line; their notes said once (stderr).
Flags withImports(Flags f);
// A preset id, a config.json, or a Hugging Face model id (the local cache first, then the Hub).
ModelArch resolveModelFlag(const std::string &text, const std::string &flag);
Budget resolveBudget(const Flags &given, bool listsAllowed);
void addTrainingFlags(CLI::App *cmd, Flags &f, bool lists);
EstimatorOptions optionsFor(const Flags &f);
// The model as a training config names it: a preset's Hugging Face id, else what was given.
std::string modelNameForExport(const std::string &text);

} // namespace headroom::cli
