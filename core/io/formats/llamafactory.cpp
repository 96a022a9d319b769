// LLaMA-Factory's YAML: finetuning_type and its LoRA keys, quantization_bit, cutoff_len, the
// precision flags (pure_bf16), flash_attn, Liger and the DeepSpeed file it names.

#include "../format.h"

#include "headroom/error.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    return j.contains("finetuning_type") || j.contains("cutoff_len") || (j.contains("stage") && j.contains("model_name_or_path"));
}

void read(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    st.wholeCheckpoint = true; // its loader: AutoModelForImageTextToText for a multimodal config (Note [Vision build])
    std::string type = "lora";
    bool bf16 = false, fp16 = false, pure = false;
    std::optional<int64_t> quant;
    bool ckptOff = false;
    readKeys(r, j,
             {{"model_name_or_path", [](Reader &r, const std::string &k, const json &v) { r.out.settings.model = r.text(k, v); }},
              {"stage", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   if (s == "dpo")
                       readDpo(r, k, v);
                   else if (s == "kto")
                       readKto(r, k, v);
                   else if (s == "ppo")
                       refusePostTraining(r, k, v, "PPO training");
                   else if (s == "rm") // not TRL's sequence classifier (Note [Reward step])
                       refusePostTraining(r, k, v, "LLaMA-Factory's reward modelling (TRL's AutoModelForCausalLMWithValueHead: "
                                                   "the lm_head's logits and a value head)");
                   else if (s != "sft" && s != "pt")
                       r.bad(k, v, "must be sft, pt, rm, dpo, kto or ppo");
               }},
              {"finetuning_type", [&](Reader &r, const std::string &k, const json &v) {
                   type = r.text(k, v);
                   if (type == "oft") { // orthogonal adapters: a kind of adapter the estimate does not model
                       r.note(k + " = oft: OFT's orthogonal adapters are not modelled; estimated as LoRA on the same "
                                  "modules (the frozen base and the activations are the same)");
                       type = "lora";
                   } else if (type != "lora" && type != "full" && type != "freeze") {
                       r.bad(k, v, "must be lora, oft, full or freeze");
                   }
               }},
              {"lora_rank", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.loraRank = static_cast<int>(r.integer(k, v, 1, 65536));
               }},
              {"lora_alpha", [](Reader &r, const std::string &k, const json &v) {
                   r.out.settings.loraAlpha = r.number(k, v, 1e-9, 1e6);
               }},
              {"lora_dropout", [](Reader &r, const std::string &k, const json &v) { r.out.settings.loraDropout = r.number(k, v, 0, 0.999999); }},
              {"lora_target", [](Reader &r, const std::string &k, const json &v) {
                   readLoraTargets(r, k, v); // PEFT's grammar: names, dotted names, a regular expression
                   if (r.out.settings.loraTargets == std::vector<std::string>{"all"})
                       r.out.settings.loraTargets = std::vector<std::string>{"all-linear"};
               }},
              {"quantization_bit", [&](Reader &r, const std::string &k, const json &v) { quant = r.integer(k, v, 2, 8); }},
              {"quantization_method", [](Reader &r, const std::string &k, const json &v) {
                   if (r.text(k, v) != "bnb" && r.text(k, v) != "bitsandbytes")
                       r.note(k + " = " + v.get<std::string>() + ": estimated as bitsandbytes NF4");
               }},
              {"double_quantization", [](Reader &r, const std::string &k, const json &v) { r.out.settings.doubleQuant = r.flag(k, v); }},
              {"per_device_train_batch_size", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, kMaxGradAccum)},
              {"cutoff_len", setInt(&TrainingSettings::seqLen, 1, 1 << 24)},
              {"pref_beta", [](Reader &r, const std::string &k, const json &v) { r.out.settings.beta = r.number(k, v, 0.0, 1e6); }},
              {"pref_loss", [](Reader &r, const std::string &k, const json &v) {
                   const std::string l = r.text(k, v);
                   if (l == "orpo" || l == "simpo") // reference-free losses: no reference forward
                       r.out.settings.reference = Reference::None;
               }},
              {"bf16", [&](Reader &r, const std::string &k, const json &v) { bf16 = r.flag(k, v); }},
              {"fp16", [&](Reader &r, const std::string &k, const json &v) { fp16 = r.flag(k, v); }},
              {"pure_bf16", [&](Reader &r, const std::string &k, const json &v) { pure = r.flag(k, v); }},
              {"disable_gradient_checkpointing", [&](Reader &r, const std::string &k, const json &v) { ckptOff = r.flag(k, v); }},
              {"flash_attn", [](Reader &r, const std::string &k, const json &v) {
                   const std::string s = r.text(k, v);
                   if (s == "disabled" || s == "eager")
                       r.out.settings.attention = Attention::Eager;
                   else if (s == "auto" || s == "sdpa")
                       r.out.settings.attention = Attention::SDPA;
                   else if (s == "fa2" || s == "fa3")
                       r.out.settings.attention = Attention::Flash;
                   else
                       r.bad(k, v, "must be auto, disabled, sdpa, fa2 or fa3");
               }},
              {"optim", readOptim},
              {"enable_liger_kernel", readFusedLoss},
              {"deepspeed", readDeepSpeedPath},
              {"image_max_pixels", readVisionInputs},
              {"image_min_pixels", readVisionInputs},
              {"video_max_pixels", readVisionInputs},
              {"video_min_pixels", readVisionInputs},
              {"video_fps", readVisionInputs},
              {"video_maxlen", readVisionInputs},
              {"freeze_vision_tower", readVisionInputs},
              {"freeze_multi_modal_projector", readVisionInputs},
              {"freeze_language_model", readVisionInputs},
              {"use_kernels", readHubKernels}});
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

std::string write(const std::string &model, const TrainingConfig &c, std::vector<std::string> &notes)
{
    const bool adapters = c.finetune != FineTune::Full;
    const bool qlora = c.finetune == FineTune::QLoRA;
    YAML::Emitter y;
    y << YAML::BeginMap;
    kv(y, "model_name_or_path", model);
    // LLaMA-Factory has no GRPO stage: refused rather than written as another step
    if (c.mode == TrainingMode::GRPO)
        throw InputError("--format", "llamafactory", "LLaMA-Factory has no GRPO stage: export to axolotl or trainer");
    kv(y, "stage", c.mode == TrainingMode::DPO || c.mode == TrainingMode::ORPO ? "dpo"
                   : c.mode == TrainingMode::KTO                               ? "kto"
                                                                               : "sft");
    if (c.mode == TrainingMode::ORPO) // LLaMA-Factory's own ORPO loss in its DPO stage
        kv(y, "pref_loss", "orpo");
    if (c.mode == TrainingMode::KTO)
        kv(y, "pref_beta", c.dpo.beta);
    if (c.mode == TrainingMode::DPO) {
        kv(y, "pref_beta", c.dpo.beta);
        if (c.dpo.reference == Reference::None)
            kv(y, "pref_loss", "simpo"); // LLaMA-Factory's reference-free DPO losses: simpo, orpo
    }
    kv(y, "do_train", true);
    kv(y, "finetuning_type", adapters ? "lora" : "full");
    if (adapters) {
        kv(y, "lora_rank", c.lora.rank);
        kv(y, "lora_alpha", c.lora.alpha);
        kv(y, "lora_dropout", c.lora.dropout);
        kv(y, "lora_target", allLinear(c.lora.targets) ? std::string("all") : joinTargets(c.lora.targets));
    }
    if (qlora) {
        kv(y, "quantization_bit", 4);
        kv(y, "double_quantization", c.lora.doubleQuant);
    }
    kv(y, "per_device_train_batch_size", c.microBatch);
    kv(y, "gradient_accumulation_steps", c.gradAccum);
    kv(y, "cutoff_len", c.seqLen);
    const bool full = !adapters;
    switch (c.precision) {
    case Precision::BF16:
        kv(y, "bf16", true);
        if (full)
            kv(y, "pure_bf16", true);
        break;
    case Precision::AmpBF16:
        kv(y, "bf16", true);
        if (!full)
            notes.push_back("LLaMA-Factory keeps the base of an adapter run in 16 bits: written as bf16");
        break;
    case Precision::FP16:
    case Precision::AmpFP16:
        kv(y, "fp16", true);
        if (full && c.precision == Precision::FP16)
            notes.push_back("LLaMA-Factory has no pure fp16 for full fine-tuning: written as fp16 (fp32 masters)");
        break;
    case Precision::FP32: break;
    }
    kv(y, "disable_gradient_checkpointing", !c.gradCheckpointing);
    kv(y, "flash_attn", c.attention == Attention::Eager ? "disabled" : c.attention == Attention::Flash ? "fa2" : "sdpa");
    kv(y, "optim", hfOptim(c, notes));
    kv(y, "enable_liger_kernel", c.loss == Loss::Fused);
    if (c.zeroStage >= 1 || c.offloadOptimizer)
        kv(y, "deepspeed", "examples/deepspeed/ds_z" + std::to_string(c.zeroStage) + (c.offloadOptimizer ? "_offload" : "") +
                               "_config.json");
    if (c.worldSize > 1)
        notes.push_back("launch on " + std::to_string(c.worldSize) + " GPUs (FORCE_TORCHRUN=1 llamafactory-cli train)");
    y << YAML::EndMap;
    return yamlDocument(y, notes);
}

} // namespace

const Format &format_llamafactory()
{
    static const Format f{TrainingFormat::LlamaFactory, "llamafactory", "LLaMA-Factory YAML", 4, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
