#pragma once
// A training-config format is one file in io/formats/ (CMake lists the folder): how its keys are
// detected, read and written. What the formats share (the bounded YAML reader, the value readers,
// the optimizer's and the adapters' keys, the document writers) is format_common.cpp.

#include "headroom/serialize.h"
#include "headroom/training_formats.h"

#include <yaml-cpp/yaml.h>

#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace headroom::formats {

using json = nlohmann::json;

constexpr size_t kMaxText = 4u << 20;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxNodes = 100000;
constexpr size_t kMaxScalar = 65536;

// The text as JSON (YAML read as JSON, bounded); throws InputError naming `name`.
json parseText(const std::string &text, const std::string &name);

struct Reader
{
    std::string name;
    TrainingImport &out;

    [[noreturn]] void bad(const std::string &key, const json &v, const std::string &why) const
    {
        throw InputError(name + ": " + key, showJson(v), why);
    }
    static bool isAuto(const json &v) { return v.is_string() && v.get<std::string>() == "auto"; }
    int64_t integer(const std::string &key, const json &v, int64_t lo, int64_t hi) const
    {
        // A whole number of any size is one: a value past int64 (2^64 - 1, 1e15 written as a float)
        // is out of the range, not "not a whole number" (issue 32, row 15).
        int64_t x = 0;
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
            x = INT64_MAX;
        else if (v.is_number_integer())
            x = v.get<int64_t>();
        else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>())
            x = std::abs(v.get<double>()) < 9.0e18 ? static_cast<int64_t>(v.get<double>())
                                                    : (v.get<double>() < 0 ? INT64_MIN : INT64_MAX);
        else
            bad(key, v, "must be a whole number");
        if (x < lo || x > hi)
            bad(key, v, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
        return x;
    }
    double number(const std::string &key, const json &v, double lo, double hi) const
    {
        if (!v.is_number())
            bad(key, v, "must be a number");
        const double x = v.get<double>();
        if (!(x >= lo && x <= hi))
            bad(key, v, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
        return x;
    }
    bool flag(const std::string &key, const json &v) const
    {
        if (v.is_boolean())
            return v.get<bool>();
        if (v.is_null())
            return false;
        if (v.is_string()) {
            const std::string s = v.get<std::string>();
            if (s == "true" || s == "True" || s == "yes")
                return true;
            if (s == "false" || s == "False" || s == "no")
                return false;
        }
        bad(key, v, "must be true or false");
    }
    std::string text(const std::string &key, const json &v) const
    {
        if (!v.is_string())
            bad(key, v, "must be a string");
        return v.get<std::string>();
    }
    std::vector<std::string> list(const std::string &key, const json &v) const
    {
        std::vector<std::string> l;
        if (v.is_string()) {
            std::stringstream in(v.get<std::string>());
            std::string item;
            while (std::getline(in, item, ','))
                if (item.find_first_not_of(' ') != std::string::npos)
                    l.push_back(item.substr(item.find_first_not_of(' '), item.find_last_not_of(' ') - item.find_first_not_of(' ') + 1));
        } else if (v.is_array()) {
            for (const auto &e : v)
                l.push_back(text(key, e));
        } else {
            bad(key, v, "must be a list of module names");
        }
        return l;
    }
    void note(const std::string &s) { out.notes.push_back(s); }
    void conflict(const std::string &s) { out.conflicts.push_back(s); }
};

// A key's reader. readKeys never hands one an empty (null) value: that is the default, said once.
using Handler = std::function<void(Reader &, const std::string &, const json &)>;
// Each key of `j` through its handler; keys with none are unknown, bookkeeping aside.
// prefix: a block's keys are named "block.key" in errors and in what is not understood.
void readKeys(Reader &r, const json &j, const std::map<std::string, Handler> &handlers, const std::string &prefix = "");
Handler setInt(std::optional<int64_t> TrainingSettings::*field, int64_t lo, int64_t hi);
bool isBookkeeping(const std::string &k);
// Keys not read whose effect is on the data, the logs or the schedule only (said apart).
bool isMemoryNeutral(const std::string &k);

// Readers of the keys several formats share.
void readOptim(Reader &r, const std::string &key, const json &v);
void readActivationOffload(Reader &r, const std::string &key, const json &v);
void readFsdpConfig(Reader &r, const std::string &prefix, const json &cfg);
void readFsdpString(Reader &r, const std::string &key, const json &v);
void ignoreKey(Reader &, const std::string &, const json &);
void readLoraRank(Reader &r, const std::string &k, const json &v);
void readLoraAlpha(Reader &r, const std::string &k, const json &v);
void readLoraDropout(Reader &r, const std::string &k, const json &v);
void readLoraTargets(Reader &r, const std::string &k, const json &v);
void readAttnImplementation(Reader &r, const std::string &k, const json &v);
void readFusedLoss(Reader &r, const std::string &key, const json &v);
void readDeepSpeedPath(Reader &r, const std::string &key, const json &v);
// Preference optimisation, reward modelling and RL (DPO, KTO, ORPO, GRPO, ...): refused in one line
// naming the mode, never estimated as supervised fine-tuning (issue 29 models them).
[[noreturn]] void refusePostTraining(Reader &r, const std::string &key, const json &v, const std::string &mode);
// Issue 29: the file trains with DPO (mode, and the reference where the file decides it; the
// rest is TRL's default, TrainingSettings::applyTo).
void readDpo(Reader &r, const std::string &key, const json &v, std::optional<Reference> reference = std::nullopt);
// Issue 29: a reward model as TRL's RewardTrainer trains it (AutoModelForSequenceClassification,
// one label; See Note [Reward step]), from Axolotl's reward_model or RewardConfig's own keys.
void readReward(Reader &r, const std::string &key, const json &v);
// Issue 29: KTO as TRL's KTOTrainer runs it (See Note [KTO step]).
void readKto(Reader &r, const std::string &key, const json &v);
// Issue 29: ORPO as TRL's ORPOTrainer runs it (See Note [ORPO step]): no reference.
void readOrpo(Reader &r, const std::string &key, const json &v);
// CPO and SimPO (Axolotl rl: cpo / simpo, TRL's CPOConfig): ORPO's step as TRL's CPOTrainer runs it;
// cpo_alpha (readCpoAlpha) says whether the chosen half's cross-entropy is in it.
void readCpo(Reader &r, const std::string &key, const json &v);
void readCpoAlpha(Reader &r, const std::string &key, const json &v);
// Issue 29: GRPO as TRL's GRPOTrainer runs it (generation, then the step on prompt + completion).
void readGrpo(Reader &r, const std::string &key, const json &v);
// GRPOConfig's own keys (TRL's config, Axolotl's trl: block): num_generations and reward_funcs
// enter GRPO; max_completion_length, temperature, use_vllm, vllm_mode and vllm_gpu_memory_utilization
// are read for it (DPOConfig shares max_completion_length: it applies to GRPO only).
const std::map<std::string, Handler> &grpoKeys();
// GRPOConfig's keys for the scenario (TRL's config and Axolotl's trl: block), each through
// `put`; the prompt's length has no key (TRL no longer truncates prompts): said in `notes`.
void writeGrpoKeys(const TrainingConfig &c, std::vector<std::string> &notes,
                   const std::function<void(const char *, const json &)> &put);
// Keys that change memory in a way the estimate does not model, said with which way it errs.
void readLoraKernel(Reader &r, const std::string &key, const json &v);   // Axolotl's fused LoRA kernels
void readHubKernels(Reader &r, const std::string &key, const json &v);   // use_kernels (the Hub's kernels)
void readUnmodelledParallel(Reader &r, const std::string &key, const json &v); // tensor / context parallel sizes
void readReplicas(Reader &r, const std::string &key, const json &v);           // data-parallel replicas of the shards
void readVisionInputs(Reader &r, const std::string &key, const json &v); // image/video pixel bounds

// Writing: the Hugging Face optim name (with a note where it is not exact), targets joined with
// commas, whether they are all-linear, and the two kinds of documents.
std::string hfOptim(const TrainingConfig &c, std::vector<std::string> &notes);
std::string joinTargets(const std::vector<std::string> &t);
inline bool allLinear(const std::vector<std::string> &t) { return t == std::vector<std::string>{"all-linear"}; }
template<typename V>
void kv(YAML::Emitter &y, const std::string &k, const V &v)
{
    y << YAML::Key << k << YAML::Value;
    if constexpr (std::is_floating_point_v<V>)
        y << YAML::DoublePrecision(15); // 0.05, not yaml-cpp's 0.050000000000000003 (15 digits read back the same)
    y << v;
}
// A YAML mapping `y` (closed) under the notes as "# Headroom: ..." comments.
std::string yamlDocument(const YAML::Emitter &y, const std::vector<std::string> &notes);
// A JSON document, two-space indented.
std::string jsonDocument(const json &j);

struct Format
{
    TrainingFormat id;
    std::string_view name;        // axolotl: the CLI's --format and --from-format
    std::string_view description; // "Axolotl YAML"
    int detectOrder;              // detection tries the formats in this order
    bool (*detects)(const json &j);
    void (*read)(Reader &r, const json &j);
    std::string (*write)(const std::string &model, const TrainingConfig &c, std::vector<std::string> &notes);
};

// One function per file in io/formats/, named format_<file> (the list is generated).
#define HEADROOM_FORMAT(name) const Format &format_##name();
#include "formats.inc"
#undef HEADROOM_FORMAT

const Format &format(TrainingFormat id);
// Every format, in TrainingFormat's order.
const std::vector<const Format *> &allFormats();

} // namespace headroom::formats
