// Axolotl's YAML: base_model, the adapter and its LoRA keys, sequence_len, micro_batch_size, the
// precision flags, the attention and Liger plugins, and the DeepSpeed file it names.

#include "../format.h"

#include "headroom/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    return j.contains("base_model") || j.contains("micro_batch_size") || j.contains("sequence_len");
}

// Axolotl's trl: block: TRL's config keys for rl: grpo (and beta, max_prompt_length for any rl).
void readTrlBlock(Reader &r, const std::string &k, const json &v)
{
    if (!v.is_object())
        r.bad(k, v, "must be a mapping of TRL's settings");
    std::map<std::string, Handler> keys = grpoKeys();
    keys["beta"] = [](Reader &r, const std::string &k, const json &v) { r.out.settings.beta = r.number(k, v, 0.0, 1e6); };
    keys["max_prompt_length"] = [](Reader &r, const std::string &k, const json &v) {
        r.out.settings.promptLen = r.integer(k, v, 1, 1 << 24);
    };
    readKeys(r, v, keys, k + ".");
}

// adapter: lora (QLoRA where the base loads in 4 bits), qlora, or none (full fine-tuning).
void readAdapter(Reader &r, const json &j, const std::optional<std::string> &adapter, bool fourBit)
{
    auto &st = r.out.settings;
    if (!adapter) {
        st.finetune = FineTune::Full;
        return;
    }
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
}

void read(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    bool bf16 = false, fp16 = false, bf16False = false, fourBit = false, bfloat16 = false, float16 = false;
    std::optional<std::string> adapter;
    readKeys(r, j,
             {{"base_model", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"adapter", [&](Reader &r, const std::string &k, const json &v) { adapter = r.text(k, v); }},
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
                   if (!(v.is_array() && v.empty()))
                       r.note(k + " = " + (v.is_array() ? r.list(k, v).front() + (v.size() > 1 ? ", ..." : "") : showJson(v)) +
                              ": modules trained in full next to the adapters are NOT in the estimate (an "
                              "under-estimate: add their weights' gradients and optimizer state)");
               }},
              {"sequence_len", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"micro_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, kMaxGradAccum)},
              {"optimizer", readOptim},
              {"bf16", [&](Reader &r, const std::string &k, const json &v) {
                   bf16 = Reader::isAuto(v) || r.flag(k, v);
                   bf16False = v.is_boolean() && !v.get<bool>();
               }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              // normalize_config: bf16 or bfloat16 load in torch.bfloat16, else fp16 or float16 in
              // torch.float16 (the weights' dtype alone, no autocast)
              {"bfloat16", [&](Reader &r, const std::string &k, const json &v) { bfloat16 = r.flag(k, v); }},
              {"float16", [&](Reader &r, const std::string &k, const json &v) { float16 = r.flag(k, v); }},
              {"gradient_checkpointing", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.gradCheckpointing = Reader::isAuto(v) || v.is_string() ? true : r.flag(k, v);
               }},
              {"activation_offloading", readActivationOffload},
              {"flash_attention", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.attention = Attention::Flash;
               }},
              {"sdp_attention", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.out.settings.attention = Attention::SDPA;
               }},
              {"attn_implementation", readAttnImplementation},
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
              // Axolotl's multimodal recipes load the model's processor (images through the vision
              // tower) and leave the dataset unprepared for it.
              {"processor_type", readVisionInputs},
              {"freeze_mm_modules", readVisionInputs},
              {"skip_prepare_dataset", ignoreKey},
              {"rl", [](Reader &r, const std::string &k, const json &v) {
                   std::string mode = r.text(k, v);
                   // IPO is DPO's step with another loss on the same log-probabilities
                   if (mode == "dpo" || mode == "ipo")
                       return readDpo(r, k, v);
                   if (mode == "kto")
                       return readKto(r, k, v);
                   if (mode == "orpo" || mode == "cpo" || mode == "simpo") // CPO, SimPO: TRL's CPOTrainer
                       return mode == "orpo" ? readOrpo(r, k, v) : readCpo(r, k, v);
                   // GDPO is GRPO's step with its rewards normalised per objective (a few numbers)
                   if (mode == "grpo" || mode == "gdpo")
                       return readGrpo(r, k, v);
                   for (char &c : mode)
                       c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
                   refusePostTraining(r, k, v, mode + " training");
               }},
              {"trl", readTrlBlock},
              {"reward_model", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       readReward(r, k, v);
               }},
              {"process_reward_model", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       refusePostTraining(r, k, v, "process reward modelling (TRL's PRMTrainer, a token classifier)");
               }},
              {"center_rewards_coefficient", ignoreKey}, // a few bytes of the reward loss
              {"num_labels", ignoreKey}, // the model class's (reward_model: one label)
              {"rl_beta", [](Reader &r, const std::string &k, const json &v) { r.out.settings.beta = r.number(k, v, 0.0, 1e6); }},
              {"cpo_alpha", readCpoAlpha},
              {"max_prompt_len", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.promptLen = r.integer(k, v, 1, 1 << 24);
               }},
              {"lora_mlp_kernel", readLoraKernel},
              {"lora_qkv_kernel", readLoraKernel},
              {"lora_o_kernel", readLoraKernel},
              {"use_kernels", readHubKernels},
              {"gptq", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.note(k + ": a GPTQ-quantized base is estimated in 16 bits (an over-estimate)");
               }},
              {"quantize_moe_experts", [](Reader &r, const std::string &k, const json &v) {
                   if (r.flag(k, v))
                       r.note(k + ": quantized MoE experts are estimated in 16 bits (an over-estimate)");
               }},
              // Axolotl's N-D parallelism: FSDP shards over dp_shard_size GPUs (each replica group
              // holds its own shards); tensor and context parallelism are not modelled.
              {"dp_shard_size", [](Reader &r, const std::string &k, const json &v) {
                   if (!Reader::isAuto(v))
                       r.out.settings.worldSize = static_cast<int>(r.integer(k, v, 1, 65536));
               }},
              {"dp_replicate_size", readReplicas},
              {"tensor_parallel_size", readUnmodelledParallel},
              {"context_parallel_size", readUnmodelledParallel},
              {"fsdp", readFsdpString},
              {"fsdp_config", [](Reader &r, const std::string &k, const json &v) {
                   if (v.is_object())
                       readFsdpConfig(r, k + ".", v);
               }},
              {"fsdp_version", [](Reader &r, const std::string &k, const json &v) {
                   readFsdpConfig(r, "", json{{k, v}});
               }}});
    readAdapter(r, j, adapter, fourBit);
    if (bf16 && fp16)
        r.conflict("bf16 and fp16 are both on: Axolotl uses bf16; estimated in bf16");
    bf16 = bf16 || bfloat16;
    fp16 = fp16 || float16;
    if (bf16)
        st.precision = Precision::BF16; // Axolotl loads the weights in torch_dtype bf16 and trains them so
    else if (fp16)
        st.precision = Precision::FP16;
    else if (bf16False)
        st.precision = Precision::FP32;
}

std::string write(const std::string &model, const TrainingConfig &c, std::vector<std::string> &notes)
{
    const bool adapters = c.finetune != FineTune::Full;
    const bool qlora = c.finetune == FineTune::QLoRA;
    YAML::Emitter y;
    y << YAML::BeginMap;
    kv(y, "base_model", model);
    if (adapters) {
        kv(y, "adapter", qlora ? "qlora" : "lora");
        kv(y, "load_in_4bit", qlora);
        kv(y, "lora_r", c.lora.rank);
        kv(y, "lora_alpha", c.lora.alpha);
        kv(y, "lora_dropout", c.lora.dropout);
        if (allLinear(c.lora.targets))
            kv(y, "lora_target_linear", true);
        else
            kv(y, "lora_target_modules", c.lora.targets);
    }
    if (c.mode == TrainingMode::DPO) { // issue 29: Axolotl's rl: dpo, the reference from the adapter or a copy
        kv(y, "rl", "dpo");
        kv(y, "rl_beta", c.dpo.beta);
        kv(y, "max_prompt_len", c.dpo.prompt(c.seqLen));
        if (c.dpo.reference == Reference::None)
            notes.push_back("a precomputed reference has no Axolotl key: written as DPO with its reference");
    }
    if (c.mode == TrainingMode::ORPO) { // SimPO: TRL's CPOTrainer without the chosen cross-entropy
        kv(y, "rl", c.dpo.chosenNll ? "orpo" : "simpo");
        if (!c.dpo.chosenNll)
            kv(y, "cpo_alpha", 0.0);
        kv(y, "rl_beta", c.dpo.beta);
        kv(y, "max_prompt_len", c.dpo.prompt(c.seqLen));
    }
    if (c.mode == TrainingMode::KTO) {
        kv(y, "rl", "kto");
        kv(y, "rl_beta", c.dpo.beta);
        kv(y, "max_prompt_len", c.dpo.prompt(c.seqLen));
    }
    if (c.mode == TrainingMode::GRPO) { // issue 29: rl: grpo with TRL's GRPOConfig keys in trl:
        kv(y, "rl", "grpo");
        y << YAML::Key << "trl" << YAML::Value << YAML::BeginMap;
        writeGrpoKeys(c, notes, [&](const char *k, const json &v) {
            if (v.is_boolean())
                kv(y, k, v.get<bool>());
            else if (v.is_number_integer())
                kv(y, k, v.get<int64_t>());
            else if (v.is_number())
                kv(y, k, v.get<double>());
            else
                kv(y, k, v.get<std::string>());
        });
        y << YAML::EndMap;
    }
    if (c.mode == TrainingMode::Reward) { // issue 29: TRL's RewardTrainer on a sequence classifier
        kv(y, "model_type", "AutoModelForSequenceClassification");
        kv(y, "num_labels", 1);
        kv(y, "reward_model", true);
    }
    kv(y, "sequence_len", c.seqLen);
    kv(y, "micro_batch_size", c.microBatch);
    kv(y, "gradient_accumulation_steps", c.gradAccum);
    kv(y, "optimizer", hfOptim(c, notes));
    if (c.precision == Precision::AmpBF16 || c.precision == Precision::AmpFP16)
        notes.push_back("Axolotl loads the weights in 16 bits: mixed precision with fp32 weights is written as " +
                        std::string(c.precision == Precision::AmpBF16 ? "bf16" : "fp16"));
    const bool b = c.precision == Precision::BF16 || c.precision == Precision::AmpBF16;
    const bool h = c.precision == Precision::FP16 || c.precision == Precision::AmpFP16;
    kv(y, "bf16", b);
    kv(y, "fp16", h);
    kv(y, "gradient_checkpointing", c.gradCheckpointing);
    if (c.activationOffload)
        kv(y, "activation_offloading", true);
    if (c.attention == Attention::Eager)
        kv(y, "eager_attention", true);
    else if (c.attention == Attention::Flash)
        kv(y, "flash_attention", true);
    else
        kv(y, "sdp_attention", true);
    if (c.loss == Loss::Fused) {
        kv(y, "plugins", std::vector<std::string>{"axolotl.integrations.liger.LigerPlugin"});
        kv(y, "liger_fused_linear_cross_entropy", true);
    }
    if (c.zeroStage >= 1 || c.offloadOptimizer)
        kv(y, "deepspeed", "deepspeed_configs/zero" + std::to_string(c.zeroStage) + (c.offloadOptimizer ? "_offload" : "") + ".json");
    if (c.offloadOptimizer)
        notes.push_back("optimizer offload: check that the DeepSpeed file named has offload_optimizer.device cpu");
    y << YAML::EndMap;
    return yamlDocument(y, notes);
}

} // namespace

const Format &format_axolotl()
{
    static const Format f{TrainingFormat::Axolotl, "axolotl", "Axolotl YAML", 3, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
