#include "headroom/training_formats.h"

#include "headroom/error.h"
#include "headroom/serialize.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace headroom {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxText = 4u << 20;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxNodes = 100000;
constexpr size_t kMaxScalar = 65536;

const std::pair<TrainingFormat, std::string_view> kFormats[] = {{TrainingFormat::Axolotl, "axolotl"},
                                                               {TrainingFormat::LlamaFactory, "llamafactory"},
                                                               {TrainingFormat::Trainer, "trainer"},
                                                               {TrainingFormat::DeepSpeed, "deepspeed"},
                                                               {TrainingFormat::Accelerate, "accelerate"}};

// ---------------------------------------------------------------- YAML, bounded, as JSON
json scalarValue(const YAML::Node &n)
{
    const std::string &s = n.Scalar();
    if (n.Tag() == "!") // quoted: a string, whatever it looks like ('no', "1")
        return s;
    if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL")
        return nullptr;
    if (s == "true" || s == "True" || s == "TRUE")
        return true;
    if (s == "false" || s == "False" || s == "FALSE")
        return false;
    char *end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0)
        return static_cast<int64_t>(i);
    const double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(d))
        return d;
    return s;
}

json toJson(const YAML::Node &n, int depth, size_t &nodes, const std::string &name)
{
    if (++nodes > kMaxNodes)
        throw InputError(name, std::to_string(nodes) + " nodes", "too large for a training config (at most 100000)");
    if (depth > kMaxDepth)
        throw InputError(name, "depth " + std::to_string(depth), "nested too deeply for a training config (at most 32)");
    switch (n.Type()) {
    case YAML::NodeType::Scalar:
        if (n.Scalar().size() > kMaxScalar)
            throw InputError(name, n.Scalar().substr(0, 40), "a value longer than 64 KiB");
        return scalarValue(n);
    case YAML::NodeType::Sequence: {
        json a = json::array();
        for (const auto &e : n)
            a.push_back(toJson(e, depth + 1, nodes, name));
        return a;
    }
    case YAML::NodeType::Map: {
        json o = json::object();
        for (const auto &kv : n) {
            if (!kv.first.IsScalar())
                throw InputError(name, "a key", "every key must be a plain name");
            o[kv.first.Scalar()] = toJson(kv.second, depth + 1, nodes, name);
        }
        return o;
    }
    default:
        return nullptr;
    }
}

json parseText(const std::string &text, const std::string &name)
{
    if (text.size() > kMaxText)
        throw InputError(name, std::to_string(text.size()) + " bytes", "too large for a training config (at most 4 MiB)");
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{')
        return parseUntrusted(text, name, kMaxText, kMaxDepth);
    try {
        size_t nodes = 0;
        const YAML::Node root = YAML::Load(text);
        json j = toJson(root, 0, nodes, name);
        if (!j.is_object())
            throw InputError(name, j.is_null() ? std::string("an empty file") : showJson(j, 60),
                             "a training config is a mapping of keys to values");
        return j;
    } catch (const YAML::Exception &e) {
        throw InputError(name, "line " + std::to_string(e.mark.line + 1), "not valid YAML: " + e.msg);
    }
}

// ---------------------------------------------------------------- reading values
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
        int64_t x = 0;
        if (v.is_number_integer())
            x = v.get<int64_t>();
        else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 1e15)
            x = static_cast<int64_t>(v.get<double>());
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

// Hugging Face's optim names (transformers.training_args.OptimizerNames), Axolotl's `optimizer`.
void readOptim(Reader &r, const std::string &key, const json &v)
{
    const std::string s = r.text(key, v);
    auto &st = r.out.settings;
    const bool paged = s.rfind("paged_", 0) == 0;
    // The optimizer table's aliases (types.cpp): one row per optimizer.
    const OptimizerTraits *found = nullptr;
    for (const auto &t : optimizerTable()) {
        std::string_view a = t.hfAliases;
        while (!a.empty() && !found) {
            const size_t sp = a.find(' ');
            if (a.substr(0, sp) == s)
                found = &t;
            a = sp == std::string_view::npos ? std::string_view() : a.substr(sp + 1);
        }
        if (found)
            break;
    }
    if (!found) {
        r.out.unknownKeys.push_back(key + " = " + s + " (optimizer not modelled; the current one is kept)");
        return;
    }
    st.optimizer = found->id;
    if (found->id == Optimizer::AdamW)
        st.optimizerImpl = s == "adamw_torch_fused" ? OptimizerImpl::Fused : OptimizerImpl::Foreach;
    if (s.find("lion_8bit") != std::string::npos)
        r.note(key + " = " + s + ": 8-bit Lion state is estimated as 32-bit (an over-estimate)");
    if (paged && found->id != Optimizer::PagedAdamW8bit)
        r.note(key + " = " + s + ": paged optimizer state can move to host memory under pressure; the estimate keeps "
                                 "it on the GPU (the peak when there is no pressure)");
}

// Axolotl's and TRL's activation_offloading (true, or Axolotl's "legacy" / "disk"): both move
// saved activations to the host with torchtune-style hooks; the estimate models torch's
// save_on_cpu, the same bytes without the streams' overlap.
void readActivationOffload(Reader &r, const std::string &key, const json &v)
{
    if (v.is_string()) {
        const std::string s = r.text(key, v);
        if (s == "disk") {
            r.out.unknownKeys.push_back(key + " = disk (offload to disk is not modelled; the current setting is kept)");
            return;
        }
        r.out.settings.activationOffload = true;
    } else {
        r.out.settings.activationOffload = r.flag(key, v);
    }
    if (*r.out.settings.activationOffload)
        r.note(key + ": estimated as torch's save_on_cpu (every saved tensor to pinned host memory); the "
                     "trainers' stream-overlapped version can keep a layer or two more on the GPU");
}

// FSDP settings as accelerate and Axolotl's fsdp_config write them (FSDP1 names and FSDP2's).
void readFsdpConfig(Reader &r, const std::string &prefix, const json &cfg)
{
    auto &st = r.out.settings;
    std::optional<int> version;
    std::optional<bool> reshard;
    for (const auto &[k, v] : cfg.items()) {
        const std::string key = prefix + k;
        const std::string bare = k.rfind("fsdp_", 0) == 0 ? k.substr(5) : k;
        if (bare == "sharding_strategy") {
            const std::string s = v.is_number() ? std::to_string(v.get<int>()) : r.text(key, v);
            if (s == "FULL_SHARD" || s == "1")
                st.zeroStage = 3;
            else if (s == "SHARD_GRAD_OP" || s == "2")
                st.zeroStage = 2;
            else if (s == "NO_SHARD" || s == "3")
                st.zeroStage = 0;
            else if (s == "HYBRID_SHARD" || s == "4") {
                st.zeroStage = 3;
                r.note(key + " = " + s + ": sharded within a node only; set the GPU count to the GPUs per node");
            } else if (s == "_HYBRID_SHARD_ZERO2" || s == "HYBRID_SHARD_ZERO2" || s == "5")
                st.zeroStage = 2;
            else
                r.bad(key, v, "must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
        } else if (bare == "version") {
            version = static_cast<int>(r.integer(key, v, 1, 2));
        } else if (bare == "reshard_after_forward") {
            if (v.is_string()) { // FSDP2 in accelerate also takes the FSDP1 strategy names here
                const std::string s = v.get<std::string>();
                reshard = s == "FULL_SHARD" || s == "HYBRID_SHARD" || s == "true";
            } else {
                reshard = r.flag(key, v);
            }
        } else if (bare == "offload_params") {
            if (r.flag(key, v))
                r.note(key + ": parameters offloaded to the CPU are not modelled; the estimate keeps them on the GPU "
                             "(an over-estimate)");
        } else if (bare == "activation_checkpointing") {
            st.gradCheckpointing = r.flag(key, v);
        } else if (bare == "auto_wrap_policy" || bare == "backward_prefetch" || bare == "cpu_ram_efficient_loading" ||
                   bare == "forward_prefetch" || bare == "state_dict_type" || bare == "sync_module_states" ||
                   bare == "use_orig_params" || bare == "transformer_layer_cls_to_wrap" || bare == "min_num_params" ||
                   bare == "limit_all_gathers" || bare == "cpu_offload_pin_memory") {
            // how FSDP wraps, prefetches and saves: no change to the step's peak that Headroom models
        } else {
            r.out.unknownKeys.push_back(key);
        }
    }
    if (version == 2 && reshard)
        st.zeroStage = *reshard ? 3 : 2;
    else if (version == 2 && !st.zeroStage)
        st.zeroStage = 3; // FSDP2's default: reshard after forward
}

// "full_shard auto_wrap offload" (TrainingArguments.fsdp)
void readFsdpString(Reader &r, const std::string &key, const json &v)
{
    const std::string s = v.is_array() ? [&] {
        std::string joined;
        for (const auto &e : v)
            joined += r.text(key, e) + " ";
        return joined;
    }()
                                       : r.text(key, v);
    if (s.find("full_shard") != std::string::npos || s.find("hybrid_shard") != std::string::npos)
        r.out.settings.zeroStage = 3;
    else if (s.find("shard_grad_op") != std::string::npos)
        r.out.settings.zeroStage = 2;
    else if (s.find_first_not_of(' ') != std::string::npos)
        r.bad(key, v, "must name full_shard, shard_grad_op or hybrid_shard");
    if (s.find("offload") != std::string::npos)
        r.note(key + ": offloaded parameters are not modelled; the estimate keeps them on the GPU (an over-estimate)");
}

// A key known to have no effect on the step's memory (logging, launch plumbing): read, not listed.
void ignoreKey(Reader &, const std::string &, const json &) {}

// PEFT's LoraConfig fields under the names Axolotl and TRL's ModelConfig share.
void readLoraRank(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraRank = static_cast<int>(r.integer(k, v, 1, 65536));
}
void readLoraAlpha(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraAlpha = r.number(k, v, 1e-9, 1e6);
}
void readLoraDropout(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraDropout = r.number(k, v, 0, 0.999999);
}
void readLoraTargets(Reader &r, const std::string &k, const json &v)
{
    if (!v.is_null())
        r.out.settings.loraTargets = r.list(k, v);
}

// Liger's kernels (they include FusedLinearCrossEntropy) or Cut Cross-Entropy: no logits.
void readFusedLoss(Reader &r, const std::string &key, const json &v)
{
    if (!v.is_null())
        r.out.settings.loss = r.flag(key, v) ? Loss::Fused : Loss::Standard;
}

// A DeepSpeed config named from another file: the stage from names like zero3.json, ds_z2_config.json.
void readDeepSpeedPath(Reader &r, const std::string &key, const json &v)
{
    if (v.is_null())
        return;
    const std::string p = r.text(key, v);
    const std::string file = p.substr(p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/') + 1);
    for (const char *pattern : {"zero", "_z"}) {
        const size_t at = file.find(pattern);
        const size_t digit = at == std::string::npos ? at : at + std::string(pattern).size();
        if (at != std::string::npos && digit < file.size() && file[digit] >= '0' && file[digit] <= '3') {
            r.out.settings.zeroStage = file[digit] - '0';
            if (file.find("offload") != std::string::npos)
                r.out.settings.offloadOptimizer = true;
            r.note(key + " = " + p + ": ZeRO-" + std::string(1, file[digit]) +
                   " read from the file name; import that file too (--from) to read its settings");
            return;
        }
    }
    r.note(key + " = " + p + ": the DeepSpeed settings are in that file; import it too (--from)");
}

// Keys every format shares that cannot change the step's memory: data, logging, saving, schedules.
bool isBookkeeping(const std::string &k)
{
    static const std::set<std::string> exact = {
        "learning_rate", "lr_scheduler", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps",
        "weight_decay", "num_epochs", "num_train_epochs", "max_steps", "seed", "data_seed", "output_dir",
        "overwrite_output_dir", "logging_steps", "logging_strategy", "logging_first_step", "log_level", "report_to",
        "run_name", "do_train", "do_eval", "do_predict", "eval_strategy", "evaluation_strategy", "eval_steps",
        "evals_per_epoch", "save_strategy", "save_steps", "saves_per_epoch", "save_total_limit", "save_only_model",
        "save_safetensors", "push_to_hub", "hub_model_id", "hub_strategy", "hub_private_repo", "resume_from_checkpoint",
        "datasets", "dataset", "dataset_prepared_path", "val_set_size", "val_size", "dataset_mixture", "dataset_num_proc",
        "dataset_text_field", "template", "chat_template", "max_samples", "overwrite_cache", "preprocessing_num_workers",
        "dataloader_num_workers", "dataloader_pin_memory", "remove_unused_columns", "per_device_eval_batch_size",
        "eval_batch_size", "eval_sample_packing", "eval_table_size", "plot_loss", "ddp_timeout", "special_tokens",
        "tokenizer_type", "tokenizer_config", "tokenizer_name_or_path", "model_revision", "revision", "trust_remote_code",
        "max_grad_norm", "gradient_clipping", "adam_beta1", "adam_beta2", "adam_epsilon", "optim_args", "tf32",
        "early_stopping_patience", "local_rank", "debug", "strict", "train_on_inputs", "group_by_length",
        "sample_packing", "pad_to_sequence_len", "gradient_checkpointing_kwargs", "use_reentrant", "bf16_full_eval",
        "fp16_full_eval", "packing", "ddp_find_unused_parameters", "include_tokens_per_second", "stage_config",
        "torch_compile", "neftune_noise_alpha", "model_type", "max_prompt_length",
        "flash_attn_cross_entropy", "flash_attn_rms_norm", "cutoff_len_eval", "lora_model_dir", "lora_fan_in_fan_out",
        "xformers_attention", "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model",
        "base_model_config", "is_llama_derived_model", "loss_watchdog_threshold", "loss_watchdog_patience"};
    static const char *prefixes[] = {"wandb_", "hub_", "eval_", "save_", "logging_", "mlflow_", "comet_", "push_"};
    if (exact.count(k))
        return true;
    return std::any_of(std::begin(prefixes), std::end(prefixes), [&](const char *p) { return k.rfind(p, 0) == 0; });
}

// ---------------------------------------------------------------- the formats
using Handler = std::function<void(Reader &, const std::string &, const json &)>;

void readKeys(Reader &r, const json &j, const std::map<std::string, Handler> &handlers)
{
    for (const auto &[k, v] : j.items()) {
        if (const auto it = handlers.find(k); it != handlers.end())
            it->second(r, k, v);
        else if (!isBookkeeping(k))
            r.out.unknownKeys.push_back(k);
    }
}

Handler setInt(std::optional<int64_t> TrainingSettings::*field, int64_t lo, int64_t hi)
{
    return [field, lo, hi](Reader &r, const std::string &k, const json &v) {
        if (!v.is_null() && !Reader::isAuto(v))
            r.out.settings.*field = r.integer(k, v, lo, hi);
    };
}

void importAxolotl(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    bool bf16 = false, fp16 = false, bf16False = false, fourBit = false;
    std::optional<std::string> adapter;
    readKeys(r, j,
             {{"base_model", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"adapter", [&](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null())
                       adapter = r.text(k, v);
               }},
              {"load_in_4bit", [&](Reader &r, const std::string &k, const json &v) { fourBit = r.flag(k, v); }},
              {"load_in_8bit", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.note(k + ": 8-bit base weights (LLM.int8) are estimated as 16-bit (an over-estimate)");
               }},
              {"lora_r", readLoraRank},
              {"lora_alpha", readLoraAlpha},
              {"lora_dropout", readLoraDropout},
              {"lora_target_modules", readLoraTargets},
              {"lora_target_linear", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.loraTargets = std::vector<std::string>{"all-linear"};
               }},
              {"lora_modules_to_save", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null() && !(v.is_array() && v.empty()))
                       r.note(k + " = " + (v.is_array() ? r.list(k, v).front() + (v.size() > 1 ? ", ..." : "") : showJson(v)) +
                              ": modules trained in full next to the adapters are NOT in the estimate (an "
                              "under-estimate: add their weights' gradients and optimizer state)");
               }},
              {"sequence_len", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"micro_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, 1 << 20)},
              {"optimizer", readOptim},
              {"bf16", [&](Reader &r, const std::string &k, const json &v) {
                   bf16 = Reader::isAuto(v) || r.flag(k, v);
                   bf16False = v.is_boolean() && !v.get<bool>();
               }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              {"gradient_checkpointing", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.gradCheckpointing = Reader::isAuto(v) || v.is_string() ? true : r.flag(k, v);
               }},
              {"activation_offloading", readActivationOffload},
              {"flash_attention", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.attention = Attention::SDPA;
               }},
              {"sdp_attention", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.attention = Attention::SDPA;
               }},
              {"eager_attention", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.attention = Attention::Eager;
               }},
              {"deepspeed", readDeepSpeedPath},
              {"liger_fused_linear_cross_entropy", readFusedLoss},
              {"cut_cross_entropy", readFusedLoss},
              {"plugins", ignoreKey},
              {"liger_rope", ignoreKey},
              {"liger_rms_norm", ignoreKey},
              {"liger_glu_activation", ignoreKey},
              {"liger_layer_norm", ignoreKey},
              {"liger_cross_entropy", ignoreKey},
              {"fsdp", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null())
                       readFsdpString(r, k, v);
               }},
              {"fsdp_config", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object())
                       readFsdpConfig(r, k + ".", v);
               }},
              {"fsdp_version", [](Reader &r, const std::string &k, const json &v) {
                   readFsdpConfig(r, "", json{{k, v}});
               }}});
    if (adapter) {
        if (*adapter == "lora")
            st.finetune = fourBit ? FineTune::QLoRA : FineTune::LoRA;
        else if (*adapter == "qlora")
            st.finetune = FineTune::QLoRA;
        else
            r.bad("adapter", *adapter, "must be lora or qlora (or absent for full fine-tuning)");
        if (*adapter == "lora" && fourBit)
            r.conflict("adapter = lora with load_in_4bit: true: Axolotl trains that as QLoRA; estimated as QLoRA");
        if (*adapter == "qlora" && !fourBit && j.contains("load_in_4bit"))
            r.conflict("adapter = qlora with load_in_4bit: false: QLoRA loads the base in 4 bits; estimated as QLoRA");
    } else {
        st.finetune = FineTune::Full;
    }
    if (bf16 && fp16)
        r.conflict("bf16 and fp16 are both on: Axolotl uses bf16; estimated in bf16");
    if (bf16)
        st.precision = Precision::BF16; // Axolotl loads the weights in torch_dtype bf16 and trains them so
    else if (fp16)
        st.precision = Precision::FP16;
    else if (bf16False)
        st.precision = Precision::FP32;
}

void importLlamaFactory(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    std::string type = "lora";
    bool bf16 = false, fp16 = false, pure = false;
    std::optional<int64_t> quant;
    bool ckptOff = false;
    readKeys(r, j,
             {{"model_name_or_path", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"stage", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   if (s == "dpo" || s == "kto" || s == "ppo")
                       r.note(k + " = " + s + ": the reference model" + (s == "ppo" ? " and the value and reward models" : "") +
                              " are NOT in the estimate (an under-estimate)");
                   else if (s == "rm")
                       r.note(k + " = rm: a value head replaces the LM head; estimated with the LM head");
               }},
              {"finetuning_type", [&](Reader &r, const std::string &k, const json &v) {
                   type = r.text(k, v);
                   if (type != "lora" && type != "full" && type != "freeze")
                       r.bad(k, v, "must be lora, full or freeze");
               }},
              {"lora_rank", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.loraRank = static_cast<int>(r.integer(k, v, 1, 65536));
               }},
              {"lora_alpha", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null())
                       r.out.settings.loraAlpha = r.number(k, v, 1e-9, 1e6);
               }},
              {"lora_dropout", [](Reader &r, const std::string &k, const json &v) { r.out.settings.loraDropout = r.number(k, v, 0, 0.999999); }},
              {"lora_target", [](Reader &r, const std::string &k, const json &v) {
                   auto l = r.list(k, v);
                   if (l == std::vector<std::string>{"all"})
                       l = {"all-linear"};
                   r.out.settings.loraTargets = l;
               }},
              {"quantization_bit", [&](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null())
                       quant = r.integer(k, v, 2, 8);
               }},
              {"quantization_method", [](Reader &r, const std::string &k, const json &v) {
                   if (r.text(k, v) != "bnb" && r.text(k, v) != "bitsandbytes")
                       r.note(k + " = " + v.get<std::string>() + ": estimated as bitsandbytes NF4");
               }},
              {"double_quantization", [](Reader &r, const std::string &k, const json &v) { r.out.settings.doubleQuant = r.flag(k, v); }},
              {"per_device_train_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, 1 << 20)},
              {"cutoff_len", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"bf16", [&](Reader &r, const std::string &k, const json &v) { bf16 = r.flag(k, v); }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              {"pure_bf16", [&](Reader &r, const std::string &k, const json &v) { pure = r.flag(k, v); }},
              {"disable_gradient_checkpointing", [&](Reader &r, const std::string &k, const json &v) { ckptOff = r.flag(k, v); }},
              {"flash_attn", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   if (s == "disabled" || s == "eager")
                       r.out.settings.attention = Attention::Eager;
                   else if (s == "auto" || s == "sdpa" || s == "fa2")
                       r.out.settings.attention = Attention::SDPA;
                   else
                       r.bad(k, v, "must be auto, disabled, sdpa or fa2");
               }},
              {"optim", readOptim},
              {"enable_liger_kernel", readFusedLoss},
              {"deepspeed", readDeepSpeedPath}});
    if (type == "freeze") {
        st.finetune = FineTune::Full;
        r.note("finetuning_type = freeze: only the last layers train; estimated as full fine-tuning (an over-estimate)");
    } else {
        st.finetune = type == "full" ? FineTune::Full : FineTune::LoRA;
    }
    if (quant) {
        if (*quant == 4 && type == "lora")
            st.finetune = FineTune::QLoRA;
        else if (*quant == 4)
            r.conflict("quantization_bit = 4 with finetuning_type = " + type +
                       ": LLaMA-Factory trains quantized models with adapters only; estimated as " + type);
        else
            r.note("quantization_bit = " + std::to_string(*quant) + ": only 4-bit (QLoRA) is modelled; the base is "
                                                                     "estimated in 16 bits (an over-estimate)");
    }
    if (!st.loraAlpha && st.loraRank)
        st.loraAlpha = 2.0 * *st.loraRank; // LLaMA-Factory's default: lora_alpha = 2 x lora_rank
    // LLaMA-Factory turns gradient checkpointing on unless told not to (model_args.disable_gradient_checkpointing).
    st.gradCheckpointing = !ckptOff;
    if (bf16 && fp16)
        r.conflict("bf16 and fp16 are both on: estimated in bf16");
    // Full fine-tuning casts the trainable weights to fp32 (cast_trainable_params_to_fp32) unless
    // pure_bf16: mixed precision with fp32 masters. Adapters train over a 16-bit base.
    const bool full = st.finetune == FineTune::Full;
    if (pure || (bf16 && !full))
        st.precision = Precision::BF16;
    else if (bf16)
        st.precision = Precision::AmpBF16;
    else if (fp16)
        st.precision = full ? Precision::AmpFP16 : Precision::FP16;
}

void importTrainer(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    bool bf16 = false, fp16 = false, peft = false, fourBit = false;
    std::optional<std::string> dtype;
    readKeys(r, j,
             {{"model_name_or_path", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"per_device_train_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, 1 << 20)},
              {"max_seq_length", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"max_length", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"gradient_checkpointing", [](Reader &r, const std::string &k, const json &v) { r.out.settings.gradCheckpointing = r.flag(k, v); }},
              {"activation_offloading", readActivationOffload}, // TRL SFTConfig
              {"bf16", [&](Reader &r, const std::string &k, const json &v) { bf16 = r.flag(k, v); }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              {"torch_dtype", [&](Reader &r, const std::string &k, const json &v) { dtype = r.text(k, v); }},
              {"dtype", [&](Reader &r, const std::string &k, const json &v) { dtype = r.text(k, v); }},
              {"attn_implementation", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   r.out.settings.attention = s == "eager" ? Attention::Eager : Attention::SDPA;
               }},
              {"optim", readOptim},
              {"use_liger_kernel", readFusedLoss},
              {"use_peft", [&](Reader &r, const std::string &k, const json &v) { peft = r.flag(k, v); }},
              {"load_in_4bit", [&](Reader &r, const std::string &k, const json &v) { fourBit = r.flag(k, v); }},
              {"load_in_8bit", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.note(k + ": 8-bit base weights are estimated as 16-bit (an over-estimate)");
               }},
              {"bnb_4bit_use_double_quant", [](Reader &r, const std::string &k, const json &v) { r.out.settings.doubleQuant = r.flag(k, v); }},
              {"bnb_4bit_quant_type", ignoreKey},
              {"lora_r", readLoraRank},
              {"lora_alpha", readLoraAlpha},
              {"lora_dropout", readLoraDropout},
              {"lora_target_modules", readLoraTargets},
              {"fsdp", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty()))
                       readFsdpString(r, k, v);
               }},
              {"fsdp_config", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object())
                       readFsdpConfig(r, k + ".", v);
               }},
              {"deepspeed", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object())
                       r.note(k + ": an inline DeepSpeed config; import it as its own file to read it");
                   else
                       readDeepSpeedPath(r, k, v);
               }}});
    if (peft || fourBit)
        st.finetune = fourBit ? FineTune::QLoRA : FineTune::LoRA;
    else if (j.contains("use_peft"))
        st.finetune = FineTune::Full;
    if (fourBit && !peft && j.contains("use_peft"))
        r.conflict("load_in_4bit without use_peft: a 4-bit base trains through adapters only; estimated as QLoRA");
    if (bf16 && fp16)
        r.conflict("bf16 and fp16 are both on: estimated in bf16");
    // The Trainer's bf16/fp16 are autocast over whatever dtype the model was loaded in: 16-bit
    // weights when torch_dtype says so, fp32 masters otherwise.
    const bool halfLoaded = dtype && (*dtype == "bfloat16" || *dtype == "float16");
    if (bf16)
        st.precision = halfLoaded ? Precision::BF16 : Precision::AmpBF16;
    else if (fp16)
        st.precision = halfLoaded ? Precision::FP16 : Precision::AmpFP16;
    else if (halfLoaded)
        st.precision = *dtype == "bfloat16" ? Precision::BF16 : Precision::FP16;
}

void importDeepSpeed(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    std::optional<int64_t> total;
    readKeys(r, j,
             {{"train_micro_batch_size_per_gpu", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, 1 << 20)},
              {"train_batch_size", [&](Reader &r, const std::string &k, const json &v) {
                   if (!Reader::isAuto(v))
                       total = r.integer(k, v, 1, int64_t(1) << 40);
               }},
              {"bf16", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object() && v.contains("enabled") && !Reader::isAuto(v["enabled"]) && r.flag(k + ".enabled", v["enabled"]))
                       r.out.settings.precision = Precision::AmpBF16; // bf16 weights + fp32 master copy: amp's 16 B/param
               }},
              {"fp16", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object() && v.contains("enabled") && !Reader::isAuto(v["enabled"]) && r.flag(k + ".enabled", v["enabled"]))
                       r.out.settings.precision = Precision::AmpFP16;
               }},
              {"optimizer", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object() || !v.contains("type"))
                       return;
                   const std::string t = r.text(k + ".type", v["type"]);
                   if (t == "AdamW" || t == "Adam" || t == "adamw" || t == "adam")
                       r.out.settings.optimizer = Optimizer::AdamW;
                   else
                       r.out.unknownKeys.push_back(k + ".type = " + t + " (optimizer not modelled; the current one is kept)");
               }},
              {"zero_optimization", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object())
                       r.bad(k, v, "must be an object");
                   for (const auto &[zk, zv] : v.items()) {
                       const std::string key = k + "." + zk;
                       if (zk == "stage")
                           r.out.settings.zeroStage = static_cast<int>(r.integer(key, zv, 0, 3));
                       else if (zk == "offload_optimizer") {
                           const std::string dev = zv.is_object() && zv.contains("device") ? r.text(key + ".device", zv["device"]) : "none";
                           r.out.settings.offloadOptimizer = dev == "cpu" || dev == "nvme";
                       } else if (zk == "offload_param") {
                           const std::string dev = zv.is_object() && zv.contains("device") ? r.text(key + ".device", zv["device"]) : "none";
                           if (dev != "none")
                               r.note(key + " = " + dev + ": offloaded parameters are not modelled; the estimate keeps "
                                                          "them on the GPU (an over-estimate)");
                       } else if (zk != "overlap_comm" && zk != "contiguous_gradients" && zk != "sub_group_size" &&
                                  zk != "reduce_bucket_size" && zk != "allgather_bucket_size" && zk != "allgather_partitions" &&
                                  zk != "reduce_scatter" && zk != "round_robin_gradients" && zk.rfind("stage3_", 0) != 0) {
                           r.out.unknownKeys.push_back(key);
                       }
                   }
               }},
              {"zero_allow_untested_optimizer", ignoreKey},
              {"comms_config", ignoreKey},
              {"monitor_config", ignoreKey},
              {"steps_per_print", ignoreKey},
              {"wall_clock_breakdown", ignoreKey},
              {"scheduler", ignoreKey},
              {"zero_force_ds_cpu_optimizer", ignoreKey}});
    if (total && st.microBatch && st.gradAccum) {
        const int64_t per = *st.microBatch * *st.gradAccum;
        if (*total % per == 0 && *total / per <= 65536)
            st.worldSize = static_cast<int>(*total / per);
        else
            r.conflict("train_batch_size = " + std::to_string(*total) + " is not micro-batch x accumulation x GPUs (" +
                       std::to_string(*st.microBatch) + " x " + std::to_string(*st.gradAccum) + " x n); the GPU count is kept");
    }
    if (st.precision && !st.offloadOptimizer)
        r.note("DeepSpeed's bf16/fp16 keeps 16-bit weights and an fp32 master copy in the optimizer: estimated as "
               "mixed precision (the same 16 bytes per parameter with AdamW)");
}

void importAccelerate(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    std::string type = "NO";
    int64_t processes = 0, machines = 1;
    readKeys(r, j,
             {{"distributed_type", [&](Reader &r, const std::string &k, const json &v) { type = r.text(k, v); }},
              {"num_processes", [&](Reader &r, const std::string &k, const json &v) { processes = r.integer(k, v, 1, 65536); }},
              {"num_machines", [&](Reader &r, const std::string &k, const json &v) { machines = r.integer(k, v, 1, 65536); }},
              {"mixed_precision", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   if (s == "bf16")
                       r.out.settings.precision = Precision::AmpBF16;
                   else if (s == "fp16")
                       r.out.settings.precision = Precision::AmpFP16;
                   else if (s != "no" && s != "fp8")
                       r.bad(k, v, "must be no, fp16, bf16 or fp8");
               }},
              {"fsdp_config", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object())
                       readFsdpConfig(r, k + ".", v);
               }},
              {"deepspeed_config", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object())
                       return;
                   for (const auto &[dk, dv] : v.items()) {
                       const std::string key = k + "." + dk;
                       if (dk == "zero_stage")
                           r.out.settings.zeroStage = static_cast<int>(r.integer(key, dv, 0, 3));
                       else if (dk == "offload_optimizer_device")
                           r.out.settings.offloadOptimizer = dv.is_string() && (dv.get<std::string>() == "cpu" || dv.get<std::string>() == "nvme");
                       else if (dk == "offload_param_device") {
                           if (dv.is_string() && dv.get<std::string>() != "none")
                               r.note(key + ": offloaded parameters are not modelled; the estimate keeps them on the GPU (an over-estimate)");
                       } else if (dk == "gradient_accumulation_steps") {
                           if (!Reader::isAuto(dv))
                               r.out.settings.gradAccum = r.integer(key, dv, 1, 1 << 20);
                       } else if (dk == "deepspeed_config_file")
                           readDeepSpeedPath(r, key, dv);
                       else if (dk != "zero3_init_flag" && dk != "zero3_save_16bit_model" && dk != "gradient_clipping" &&
                                dk != "deepspeed_multinode_launcher")
                           r.out.unknownKeys.push_back(key);
                   }
               }},
              {"compute_environment", ignoreKey},
              {"downcast_bf16", ignoreKey},
              {"machine_rank", ignoreKey},
              {"main_training_function", ignoreKey},
              {"rdzv_backend", ignoreKey},
              {"same_network", ignoreKey},
              {"tpu_env", ignoreKey},
              {"tpu_use_cluster", ignoreKey},
              {"tpu_use_sudo", ignoreKey},
              {"use_cpu", ignoreKey},
              {"gpu_ids", ignoreKey},
              {"main_process_ip", ignoreKey},
              {"main_process_port", ignoreKey},
              {"enable_cpu_affinity", ignoreKey},
              {"dynamo_config", ignoreKey}});
    if (processes > 0)
        st.worldSize = static_cast<int>(std::min<int64_t>(65536, processes)); // num_processes counts every GPU
    if (type == "NO" || type == "MULTI_GPU") {
        if (!st.zeroStage)
            st.zeroStage = 0;
    } else if (type != "FSDP" && type != "DEEPSPEED") {
        r.bad("distributed_type", type, "must be NO, MULTI_GPU, FSDP or DEEPSPEED");
    }
    if (machines > 1 && processes > 0 && processes % machines != 0)
        r.conflict("num_processes = " + std::to_string(processes) + " is not a multiple of num_machines = " +
                   std::to_string(machines));
}

std::optional<TrainingFormat> detect(const json &j)
{
    auto has = [&](const char *k) { return j.contains(k); };
    if (has("zero_optimization") || has("train_micro_batch_size_per_gpu") || has("train_batch_size"))
        return TrainingFormat::DeepSpeed;
    if (has("distributed_type") || has("compute_environment"))
        return TrainingFormat::Accelerate;
    if (has("base_model") || has("micro_batch_size") || has("sequence_len"))
        return TrainingFormat::Axolotl;
    if (has("finetuning_type") || has("cutoff_len") || (has("stage") && has("model_name_or_path")))
        return TrainingFormat::LlamaFactory;
    if (has("per_device_train_batch_size") || has("max_seq_length") || has("max_length") || has("output_dir"))
        return TrainingFormat::Trainer;
    return std::nullopt;
}

// ---------------------------------------------------------------- export helpers
std::string hfOptim(const TrainingConfig &c, std::vector<std::string> &notes)
{
    if (c.optimizer == Optimizer::AdamW) {
        if (c.optimizerImpl == OptimizerImpl::ForLoop)
            notes.push_back("the for-loop AdamW has no optim name; written as adamw_torch (foreach)");
        return c.optimizerImpl == OptimizerImpl::Fused ? "adamw_torch_fused" : "adamw_torch";
    }
    if (c.optimizer == Optimizer::SGDMomentum)
        notes.push_back("SGD with momentum is written as optim sgd; set its momentum in optim_args");
    return std::string(traits(c.optimizer).hfOptim);
}

std::string joinTargets(const std::vector<std::string> &t)
{
    std::string s;
    for (const auto &x : t)
        s += (s.empty() ? "" : ",") + x;
    return s;
}

bool allLinear(const std::vector<std::string> &t) { return t == std::vector<std::string>{"all-linear"}; }

void emitComments(YAML::Emitter &y, const std::vector<std::string> &notes)
{
    for (const auto &n : notes)
        y << YAML::Comment("Headroom: " + n) << YAML::Newline;
}

} // namespace

// ---------------------------------------------------------------- public
std::string_view toString(TrainingFormat f)
{
    for (const auto &[v, n] : kFormats)
        if (v == f)
            return n;
    return "axolotl";
}

std::string_view describe(TrainingFormat f)
{
    switch (f) {
    case TrainingFormat::Axolotl: return "Axolotl YAML";
    case TrainingFormat::LlamaFactory: return "LLaMA-Factory YAML";
    case TrainingFormat::Trainer: return "HF TrainingArguments / TRL SFTConfig";
    case TrainingFormat::DeepSpeed: return "DeepSpeed JSON";
    case TrainingFormat::Accelerate: return "accelerate config YAML";
    }
    return "";
}

TrainingFormat parseTrainingFormat(std::string_view s, const std::string &field)
{
    for (const auto &[v, n] : kFormats)
        if (n == s)
            return v;
    throw InputError(field, std::string(s), "must be axolotl, llamafactory, trainer, deepspeed or accelerate");
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
}

TrainingImport importTrainingConfig(const std::string &text, const std::string &name, std::optional<TrainingFormat> format)
{
    const json j = parseText(text, name);
    if (!format)
        format = detect(j);
    if (!format)
        throw InputError(name, "its keys",
                         "not a training config Headroom knows (Axolotl, LLaMA-Factory, TrainingArguments/SFTConfig, "
                         "DeepSpeed, accelerate); name its format (--from-format)");
    TrainingImport out;
    out.format = *format;
    Reader r{name, out};
    switch (*format) {
    case TrainingFormat::Axolotl: importAxolotl(r, j); break;
    case TrainingFormat::LlamaFactory: importLlamaFactory(r, j); break;
    case TrainingFormat::Trainer: importTrainer(r, j); break;
    case TrainingFormat::DeepSpeed: importDeepSpeed(r, j); break;
    case TrainingFormat::Accelerate: importAccelerate(r, j); break;
    }
    out.shardsWithoutGpuCount = out.settings.zeroStage.value_or(0) > 0 && !out.settings.worldSize;
    return out;
}

TrainingImport importTrainingConfigFile(const std::string &path, std::optional<TrainingFormat> format)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError("--from", path, "cannot open the file");
    std::string text(kMaxText + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
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
        out.unknownKeys.insert(out.unknownKeys.end(), f.unknownKeys.begin(), f.unknownKeys.end());
        out.conflicts.insert(out.conflicts.end(), f.conflicts.begin(), f.conflicts.end());
        out.notes.insert(out.notes.end(), f.notes.begin(), f.notes.end());
    }
    // A ZeRO stage from one file and the GPU count from another is fine.
    out.shardsWithoutGpuCount = out.settings.zeroStage.value_or(0) > 0 && !out.settings.worldSize;
    return out;
}

std::string exportTrainingConfig(TrainingFormat format, const std::string &model, const TrainingConfig &c,
                                 std::vector<std::string> *notesOut)
{
    std::vector<std::string> notes;
    const bool adapters = c.finetune != FineTune::Full;
    const bool qlora = c.finetune == FineTune::QLoRA;
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
    if (format == TrainingFormat::DeepSpeed) {
        json j = {{"train_micro_batch_size_per_gpu", c.microBatch},
                  {"gradient_accumulation_steps", c.gradAccum},
                  {"train_batch_size", c.microBatch * c.gradAccum * c.worldSize},
                  {"zero_optimization", {{"stage", std::min(c.zeroStage, 3)}}}};
        if (c.offloadOptimizer)
            j["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
        if (c.precision == Precision::AmpBF16 || c.precision == Precision::BF16)
            j["bf16"] = {{"enabled", true}};
        if (c.precision == Precision::AmpFP16 || c.precision == Precision::FP16)
            j["fp16"] = {{"enabled", true}};
        if (c.precision == Precision::BF16 || c.precision == Precision::FP16)
            notes.push_back("DeepSpeed keeps an fp32 master copy with bf16/fp16; it has no pure 16-bit mode");
        if (c.optimizer == Optimizer::AdamW)
            j["optimizer"] = {{"type", "AdamW"}};
        else
            notes.push_back("the optimizer is not written: DeepSpeed takes the Trainer's (" + hfOptim(c, notes) + ")");
        if (notesOut)
            *notesOut = notes;
        return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    }
    if (format == TrainingFormat::Trainer) {
        json j = {{"model_name_or_path", model},
                  {"per_device_train_batch_size", c.microBatch},
                  {"gradient_accumulation_steps", c.gradAccum},
                  {"max_length", c.seqLen},
                  {"gradient_checkpointing", c.gradCheckpointing},
                  {"attn_implementation", c.attention == Attention::Eager ? "eager" : "sdpa"},
                  {"optim", hfOptim(c, notes)},
                  {"use_peft", adapters},
                  {"use_liger_kernel", c.loss == Loss::Fused}};
        switch (c.precision) {
        case Precision::BF16: j["bf16"] = true; j["torch_dtype"] = "bfloat16"; break;
        case Precision::FP16: j["fp16"] = true; j["torch_dtype"] = "float16"; break;
        case Precision::AmpBF16: j["bf16"] = true; j["torch_dtype"] = "float32"; break;
        case Precision::AmpFP16: j["fp16"] = true; j["torch_dtype"] = "float32"; break;
        case Precision::FP32: j["torch_dtype"] = "float32"; break;
        }
        if (adapters) {
            j["lora_r"] = c.lora.rank;
            j["lora_alpha"] = c.lora.alpha;
            j["lora_dropout"] = c.lora.dropout;
            j["lora_target_modules"] = allLinear(c.lora.targets) ? json("all-linear") : json(c.lora.targets);
        }
        if (qlora) {
            j["load_in_4bit"] = true;
            j["bnb_4bit_quant_type"] = "nf4";
            j["bnb_4bit_use_double_quant"] = c.lora.doubleQuant;
        }
        if (c.zeroStage >= 2)
            j["fsdp"] = c.zeroStage == 3 ? "full_shard auto_wrap" : "shard_grad_op auto_wrap";
        if (c.zeroStage == 1 || c.offloadOptimizer) {
            j["deepspeed"] = "ds_config.json";
            notes.push_back("ZeRO-" + std::to_string(c.zeroStage) + (c.offloadOptimizer ? " with optimizer offload" : "") +
                            " runs through DeepSpeed: export --format deepspeed to ds_config.json");
        }
        if (c.worldSize > 1)
            notes.push_back("launch on " + std::to_string(c.worldSize) + " GPUs (torchrun --nproc-per-node or accelerate)");
        if (notesOut)
            *notesOut = notes;
        return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    }

    YAML::Emitter y;
    y << YAML::BeginMap;
    auto kv = [&](const std::string &k, const auto &v) { y << YAML::Key << k << YAML::Value << v; };
    switch (format) {
    case TrainingFormat::Axolotl: {
        kv("base_model", model);
        if (adapters) {
            kv("adapter", qlora ? "qlora" : "lora");
            kv("load_in_4bit", qlora);
            kv("lora_r", c.lora.rank);
            kv("lora_alpha", c.lora.alpha);
            kv("lora_dropout", c.lora.dropout);
            if (allLinear(c.lora.targets))
                kv("lora_target_linear", true);
            else
                kv("lora_target_modules", c.lora.targets);
        }
        kv("sequence_len", c.seqLen);
        kv("micro_batch_size", c.microBatch);
        kv("gradient_accumulation_steps", c.gradAccum);
        kv("optimizer", hfOptim(c, notes));
        if (c.precision == Precision::AmpBF16 || c.precision == Precision::AmpFP16)
            notes.push_back("Axolotl loads the weights in 16 bits: mixed precision with fp32 weights is written as " +
                            std::string(c.precision == Precision::AmpBF16 ? "bf16" : "fp16"));
        const bool b = c.precision == Precision::BF16 || c.precision == Precision::AmpBF16;
        const bool h = c.precision == Precision::FP16 || c.precision == Precision::AmpFP16;
        kv("bf16", b);
        kv("fp16", h);
        kv("gradient_checkpointing", c.gradCheckpointing);
        if (c.activationOffload)
            kv("activation_offloading", true);
        if (c.attention == Attention::Eager)
            kv("eager_attention", true);
        else
            kv("sdp_attention", true);
        if (c.loss == Loss::Fused) {
            kv("plugins", std::vector<std::string>{"axolotl.integrations.liger.LigerPlugin"});
            kv("liger_fused_linear_cross_entropy", true);
        }
        if (c.zeroStage >= 1 || c.offloadOptimizer)
            kv("deepspeed", "deepspeed_configs/zero" + std::to_string(c.zeroStage) +
                                (c.offloadOptimizer ? "_offload" : "") + ".json");
        if (c.offloadOptimizer)
            notes.push_back("optimizer offload: check that the DeepSpeed file named has offload_optimizer.device cpu");
        break;
    }
    case TrainingFormat::LlamaFactory: {
        kv("model_name_or_path", model);
        kv("stage", "sft");
        kv("do_train", true);
        kv("finetuning_type", adapters ? "lora" : "full");
        if (adapters) {
            kv("lora_rank", c.lora.rank);
            kv("lora_alpha", c.lora.alpha);
            kv("lora_dropout", c.lora.dropout);
            kv("lora_target", allLinear(c.lora.targets) ? std::string("all") : joinTargets(c.lora.targets));
        }
        if (qlora) {
            kv("quantization_bit", 4);
            kv("double_quantization", c.lora.doubleQuant);
        }
        kv("per_device_train_batch_size", c.microBatch);
        kv("gradient_accumulation_steps", c.gradAccum);
        kv("cutoff_len", c.seqLen);
        const bool full = !adapters;
        switch (c.precision) {
        case Precision::BF16:
            kv("bf16", true);
            if (full)
                kv("pure_bf16", true);
            break;
        case Precision::AmpBF16:
            kv("bf16", true);
            if (!full)
                notes.push_back("LLaMA-Factory keeps the base of an adapter run in 16 bits: written as bf16");
            break;
        case Precision::FP16:
        case Precision::AmpFP16:
            kv("fp16", true);
            if (full && c.precision == Precision::FP16)
                notes.push_back("LLaMA-Factory has no pure fp16 for full fine-tuning: written as fp16 (fp32 masters)");
            break;
        case Precision::FP32: break;
        }
        kv("disable_gradient_checkpointing", !c.gradCheckpointing);
        kv("flash_attn", c.attention == Attention::Eager ? "disabled" : "sdpa");
        kv("optim", hfOptim(c, notes));
        kv("enable_liger_kernel", c.loss == Loss::Fused);
        if (c.zeroStage >= 1 || c.offloadOptimizer)
            kv("deepspeed", "examples/deepspeed/ds_z" + std::to_string(c.zeroStage) +
                                (c.offloadOptimizer ? "_offload" : "") + "_config.json");
        if (c.worldSize > 1)
            notes.push_back("launch on " + std::to_string(c.worldSize) + " GPUs (FORCE_TORCHRUN=1 llamafactory-cli train)");
        break;
    }
    case TrainingFormat::Accelerate: {
        kv("compute_environment", "LOCAL_MACHINE");
        const bool ds = c.zeroStage == 1 || c.offloadOptimizer;
        kv("distributed_type", ds ? "DEEPSPEED" : c.zeroStage >= 2 ? "FSDP" : c.worldSize > 1 ? "MULTI_GPU" : "NO");
        kv("num_machines", 1);
        kv("num_processes", c.worldSize);
        kv("mixed_precision", c.precision == Precision::AmpBF16 || c.precision == Precision::BF16   ? "bf16"
                              : c.precision == Precision::AmpFP16 || c.precision == Precision::FP16 ? "fp16"
                                                                                                      : "no");
        if (c.precision == Precision::BF16 || c.precision == Precision::FP16)
            notes.push_back("accelerate's mixed_precision autocasts; the 16-bit weights come from the script's torch_dtype");
        if (ds) {
            y << YAML::Key << "deepspeed_config" << YAML::Value << YAML::BeginMap;
            kv("zero_stage", c.zeroStage);
            kv("offload_optimizer_device", c.offloadOptimizer ? "cpu" : "none");
            kv("offload_param_device", "none");
            kv("gradient_accumulation_steps", c.gradAccum);
            y << YAML::EndMap;
        } else if (c.zeroStage >= 2) {
            y << YAML::Key << "fsdp_config" << YAML::Value << YAML::BeginMap;
            kv("fsdp_version", 2);
            kv("fsdp_reshard_after_forward", c.zeroStage == 3);
            kv("fsdp_activation_checkpointing", c.gradCheckpointing);
            kv("fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP");
            kv("fsdp_offload_params", false);
            kv("fsdp_cpu_ram_efficient_loading", true);
            kv("fsdp_state_dict_type", "SHARDED_STATE_DICT");
            y << YAML::EndMap;
        }
        notes.push_back("accelerate's config carries the launch only: batch, sequence length and the model are the "
                        "training script's");
        break;
    }
    default: break;
    }
    y << YAML::EndMap;
    YAML::Emitter head;
    emitComments(head, notes);
    if (notesOut)
        *notesOut = notes;
    std::string text = std::string(head.c_str());
    if (!text.empty() && text.back() != '\n')
        text += '\n';
    return text + y.c_str() + "\n";
}

} // namespace headroom
