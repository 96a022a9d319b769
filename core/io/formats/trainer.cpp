// Hugging Face TrainingArguments and TRL's SFTConfig (JSON or YAML), with TRL's ModelConfig keys
// (use_peft, lora_*, load_in_4bit, attn_implementation, torch_dtype) and the fsdp / deepspeed keys.

#include "../format.h"

#include "headroom/error.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    // TRL's CLI configs (`trl sft --config`) may state only the model (ModelConfig's
    // model_name_or_path) and a few TrainingArguments, as trl/examples/cli_configs does.
    const bool trainingArgument = j.contains("learning_rate") || j.contains("lr_scheduler_type") ||
                                  j.contains("num_train_epochs") || j.contains("gradient_accumulation_steps");
    return j.contains("per_device_train_batch_size") || j.contains("max_seq_length") || j.contains("max_length") ||
           j.contains("output_dir") || (j.contains("model_name_or_path") && trainingArgument);
}

void read(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    bool bf16 = false, fp16 = false, peft = false, fourBit = false;
    std::optional<std::string> dtype;
    // TRL's preference and RL configs, by their keys (issue 29): GRPO where it generates, else read
    // as DPOConfig: ORPO/KTO/CPO share its keys, and a reference-free one reads as DPO with a
    // reference, an over-estimate.
    const bool grpo = j.contains("num_generations") || j.contains("reward_funcs");
    const Handler refuseTrl = [grpo, &j](Reader &r, const std::string &k, const json &v) {
        if (k == "beta")
            r.out.settings.beta = r.number(k, v, 0.0, 1e6);
        if (grpo)
            return readGrpo(r, k, v);
        if (j.contains("desirable_weight") || j.contains("undesirable_weight")) // KTOConfig's beta
            return readKto(r, k, v);
        if (j.contains("cpo_alpha") || j.contains("simpo_gamma")) // CPOConfig's
            return readCpo(r, k, v);
        readDpo(r, k, v);
    };
    std::map<std::string, Handler> keys = grpoKeys();
    keys.insert(
             {{"model_name_or_path", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"per_device_train_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, kMaxGradAccum)},
              {"max_seq_length", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"max_length", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"gradient_checkpointing", [](Reader &r, const std::string &k, const json &v) { r.out.settings.gradCheckpointing = r.flag(k, v); }},
              {"activation_offloading", readActivationOffload}, // TRL SFTConfig
              {"bf16", [&](Reader &r, const std::string &k, const json &v) { bf16 = r.flag(k, v); }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              {"torch_dtype", [&](Reader &r, const std::string &k, const json &v) { dtype = r.text(k, v); }},
              {"dtype", [&](Reader &r, const std::string &k, const json &v) { dtype = r.text(k, v); }},
              {"attn_implementation", readAttnImplementation},
              // TRL: the model's from_pretrained arguments, where its recipes put these two.
              {"model_init_kwargs", [&](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object())
                       r.bad(k, v, "must be a mapping of from_pretrained's arguments");
                   for (const auto &[key, value] : v.items()) {
                       if (value.is_null()) // the default, as at the top level
                           continue;
                       if (key == "attn_implementation")
                           readAttnImplementation(r, k + "." + key, value);
                       else if (key == "torch_dtype" || key == "dtype")
                           dtype = r.text(k + "." + key, value);
                       else
                           r.out.unknownKeys.push_back(k + "." + key);
                   }
               }},
              {"optim", readOptim},
              {"use_liger_kernel", readFusedLoss},
              {"use_kernels", readHubKernels},
              {"use_peft", [&](Reader &r, const std::string &k, const json &v) { peft = r.flag(k, v); }},
              {"beta", refuseTrl}, // DPOConfig, ORPOConfig, KTOConfig, GRPOConfig
              {"max_prompt_length", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.promptLen = r.integer(k, v, 1, 1 << 24);
               }},
              {"precompute_ref_log_probs", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.reference = Reference::None;
               }},
              {"center_rewards_coefficient", readReward}, // RewardConfig's own key
              {"cpo_alpha", [](Reader &r, const std::string &k, const json &v) { // CPOConfig's own keys
                   readCpo(r, k, v);
                   readCpoAlpha(r, k, v);
               }},
              {"simpo_gamma", readCpo},
              {"desirable_weight", readKto},                // KTOConfig's own keys
              {"undesirable_weight", readKto},
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
                   if (!(v.is_string() && v.get<std::string>().empty()))
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
    readKeys(r, j, keys);
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

std::string write(const std::string &model, const TrainingConfig &c, std::vector<std::string> &notes)
{
    const bool adapters = c.finetune != FineTune::Full;
    json j = {{"model_name_or_path", model},
              {"per_device_train_batch_size", c.microBatch},
              {"gradient_accumulation_steps", c.gradAccum},
              {"max_length", c.seqLen},
              {"gradient_checkpointing", c.gradCheckpointing},
              {"attn_implementation", c.attention == Attention::Eager   ? "eager"
                                     : c.attention == Attention::Flash ? "flash_attention_2"
                                                                       : "sdpa"},
              {"optim", hfOptim(c, notes)},
              {"use_peft", adapters},
              {"use_liger_kernel", c.loss == Loss::Fused}};
    if (c.mode == TrainingMode::DPO) { // TRL's DPOConfig
        j["beta"] = c.dpo.beta;
        j["max_prompt_length"] = c.dpo.prompt(c.seqLen);
        j["precompute_ref_log_probs"] = c.dpo.reference == Reference::None;
    }
    if (c.mode == TrainingMode::KTO) { // TRL's KTOConfig: its own keys say so
        j["beta"] = c.dpo.beta;
        j["desirable_weight"] = 1.0;
        j["undesirable_weight"] = 1.0;
        j["precompute_ref_log_probs"] = c.dpo.reference == Reference::None;
    }
    if (c.mode == TrainingMode::GRPO) { // TRL's GRPOConfig: no max_length (prompt + completion)
        j.erase("max_length");
        writeGrpoKeys(c, notes, [&](const char *k, const json &v) { j[k] = v; });
    }
    // TRL's RewardConfig: its own key says so (0: no centring to speak of; None would read back as
    // a key left empty, which says nothing)
    if (c.mode == TrainingMode::Reward)
        j["center_rewards_coefficient"] = 0.0;
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
    if (c.finetune == FineTune::QLoRA) {
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
    return jsonDocument(j);
}

} // namespace

const Format &format_trainer()
{
    static const Format f{TrainingFormat::Trainer, "trainer", "HF TrainingArguments / TRL SFTConfig", 5, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
