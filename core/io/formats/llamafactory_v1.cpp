// LLaMA-Factory's v1 YAML (`llamafactory-cli v1`, examples/v1/): `model`, `peft_config`,
// `quant_config`, `kernel_config` and `dist_config` blocks, `micro_batch_size`, `cutoff_len`.
// Read before Axolotl's, whose `micro_batch_size` it shares (issue 28: v1 files were read as
// Axolotl, their model ignored).

#include "../format.h"

#include "headroom/error.h"

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    if (j.contains("model_class"))
        return true;
    return j.contains("model") && (j.contains("peft_config") || j.contains("dist_config") || j.contains("kernel_config") ||
                                   j.contains("quant_config") || j.contains("cutoff_len"));
}

std::string nameOf(Reader &r, const std::string &key, const json &block)
{
    if (!block.is_object())
        r.bad(key, block, "must be a mapping with a name");
    if (!block.contains("name") || block.at("name").is_null())
        r.bad(key + ".name", json(nullptr), "is missing");
    return r.text(key + ".name", block.at("name"));
}

void read(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    std::optional<int64_t> quantBit;
    bool lora = false;
    readKeys(
        r, j,
        {{"model", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
         {"model_class", [](Reader &r, const std::string &k, const json &v) {
              const std::string c = r.text(k, v);
              if (c != "llm")
                  r.note(k + " = " + c + ": only the language model is estimated (vision inputs are not modelled yet)");
          }},
         {"template", ignoreKey},
         {"train_dataset", ignoreKey},
         {"eval_dataset", ignoreKey},
         {"trust_remote_code", ignoreKey},
         {"peft_config", [&](Reader &r, const std::string &k, const json &v) {
              if (v.is_null())
                  return;
              const std::string name = nameOf(r, k, v);
              if (name == "lora") {
                  lora = true;
              } else if (name == "freeze") {
                  r.note(k + ".name = freeze: only some layers train; estimated as full fine-tuning (an over-estimate)");
              } else {
                  r.bad(k + ".name", v.at("name"), "must be lora or freeze");
              }
              readKeys(r, v,
                       {{"name", ignoreKey},
                        {"r", readLoraRank},
                        {"lora_alpha", readLoraAlpha},
                        {"lora_dropout", readLoraDropout},
                        {"target_modules", [](Reader &r, const std::string &key, const json &t) {
                             readLoraTargets(r, key, t);
                             if (r.out.settings.loraTargets == std::vector<std::string>{"all"})
                                 r.out.settings.loraTargets = std::vector<std::string>{"all-linear"};
                         }}},
                       k + ".");
          }},
         {"quant_config", [&](Reader &r, const std::string &k, const json &v) {
              if (v.is_null())
                  return;
              const std::string name = nameOf(r, k, v);
              if (name != "bnb" && name != "auto")
                  r.note(k + ".name = " + name + ": estimated as bitsandbytes NF4");
              readKeys(r, v,
                       {{"name", ignoreKey},
                        {"quantization_bit", [&](Reader &r, const std::string &key, const json &b) {
                             quantBit = r.integer(key, b, 2, 8);
                         }}},
                       k + ".");
          }},
         {"kernel_config", [](Reader &r, const std::string &k, const json &v) {
              if (v.is_null())
                  return;
              // LLaMA-Factory's fused kernels (Liger's among them) only lower the step's memory.
              r.note(k + ": LLaMA-Factory's fused kernels are not modelled; estimated with PyTorch's own ops "
                         "(an over-estimate where they fuse the loss)");
          }},
         {"dist_config", [](Reader &r, const std::string &k, const json &v) {
              if (v.is_null())
                  return;
              const std::string name = nameOf(r, k, v);
              if (name == "fsdp2" || name == "fsdp" || name == "fsdpturbo") {
                  r.out.settings.zeroStage = 3;
                  if (name == "fsdpturbo")
                      r.note(k + ".name = fsdpturbo: estimated as FSDP2 full sharding (its expert parallelism is not "
                                 "modelled: an over-estimate per GPU for MoE experts)");
              } else if (name == "deepspeed") {
                  if (v.contains("config_file"))
                      readDeepSpeedPath(r, k + ".config_file", v.at("config_file"));
              } else {
                  r.bad(k + ".name", v.at("name"), "must be fsdp2, fsdpturbo or deepspeed");
              }
              r.out.shardsWithoutGpuCount = true; // the GPU count is the launcher's, never in the file
          }},
         {"micro_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
         {"global_batch_size", [](Reader &r, const std::string &k, const json &v) {
              const int64_t g = r.integer(k, v, 1, int64_t(1) << 40);
              r.note(k + " = " + std::to_string(g) +
                     ": gradient accumulation is global_batch_size / (micro_batch_size x GPUs); set it with the GPU "
                     "count");
          }},
         {"cutoff_len", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
         {"bf16", [](Reader &r, const std::string &k, const json &v) {
              if (r.flag(k, v))
                  r.out.settings.precision = Precision::BF16;
          }},
         {"sample_backend", ignoreKey},
         {"max_new_tokens", ignoreKey}});
    st.finetune = !lora ? FineTune::Full : (quantBit && *quantBit == 4 ? FineTune::QLoRA : FineTune::LoRA);
    if (quantBit && *quantBit != 4)
        r.note("quant_config.quantization_bit = " + std::to_string(*quantBit) +
               ": only 4-bit (QLoRA) is modelled; the base is estimated in 16 bits (an over-estimate)");
    if (quantBit && *quantBit == 4 && !lora)
        r.conflict("quant_config.quantization_bit = 4 without peft_config: a quantized base trains through adapters "
                   "only; estimated as full fine-tuning in 16 bits");
    if (!st.precision)
        r.note("bf16 is not set: v1 loads the model in its config's dtype; estimated in bf16");
}

std::string write(const std::string &model, const TrainingConfig &c, std::vector<std::string> &notes)
{
    const bool adapters = c.finetune != FineTune::Full;
    YAML::Emitter y;
    y << YAML::BeginMap;
    kv(y, "model", model);
    kv(y, "model_class", "llm");
    if (adapters) {
        y << YAML::Key << "peft_config" << YAML::Value << YAML::BeginMap;
        kv(y, "name", "lora");
        kv(y, "r", c.lora.rank);
        kv(y, "lora_alpha", c.lora.alpha);
        kv(y, "lora_dropout", c.lora.dropout);
        kv(y, "target_modules", allLinear(c.lora.targets) ? std::string("all") : joinTargets(c.lora.targets));
        y << YAML::EndMap;
    }
    if (c.finetune == FineTune::QLoRA) {
        y << YAML::Key << "quant_config" << YAML::Value << YAML::BeginMap;
        kv(y, "name", "bnb");
        kv(y, "quantization_bit", 4);
        y << YAML::EndMap;
    }
    if (c.zeroStage >= 1) {
        y << YAML::Key << "dist_config" << YAML::Value << YAML::BeginMap;
        if (c.zeroStage == 3 && !c.offloadOptimizer) {
            kv(y, "name", "fsdp2");
        } else {
            kv(y, "name", "deepspeed");
            kv(y, "config_file", "examples/deepspeed/ds_z" + std::to_string(c.zeroStage) + (c.offloadOptimizer ? "_offload" : "") +
                                     "_config.json");
        }
        y << YAML::EndMap;
    }
    kv(y, "micro_batch_size", c.microBatch);
    kv(y, "global_batch_size", c.microBatch * c.gradAccum * c.worldSize);
    kv(y, "cutoff_len", c.seqLen);
    if (c.precision == Precision::BF16)
        kv(y, "bf16", true);
    else
        notes.push_back("LLaMA-Factory v1 has bf16 or the model's own dtype: " + std::string(toString(c.precision)) +
                        " is not written");
    if (c.gradCheckpointing)
        notes.push_back("LLaMA-Factory v1 has no gradient-checkpointing key in its examples: not written");
    if (c.worldSize > 1)
        notes.push_back("launch on " + std::to_string(c.worldSize) + " GPUs");
    y << YAML::EndMap;
    return yamlDocument(y, notes);
}

} // namespace

const Format &format_llamafactory_v1()
{
    static const Format f{TrainingFormat::LlamaFactoryV1, "llamafactory-v1", "LLaMA-Factory v1 YAML", 0, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
