// DeepSpeed's JSON config: micro-batch, accumulation, the ZeRO stage and its optimizer offload,
// the precision and the optimizer (when DeepSpeed builds it).

#include "../format.h"

#include "headroom/error.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    return j.contains("zero_optimization") || j.contains("train_micro_batch_size_per_gpu") || j.contains("train_batch_size");
}

void read(Reader &r, const json &j)
{
    auto &st = r.out.settings;
    std::optional<int64_t> total;
    readKeys(r, j,
             {{"train_micro_batch_size_per_gpu", setInt(&TrainingSettings::microBatch, 1, 1 << 20)},
              {"gradient_accumulation_steps", setInt(&TrainingSettings::gradAccum, 1, kMaxGradAccum)},
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
                       r.out.unknownKeys.push_back(k + ".type = " + t + " (optimizer not modelled; estimated with Headroom's default, AdamW)");
               }},
              {"zero_optimization", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object())
                       r.bad(k, v, "must be an object");
                   std::string limits;
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
                       } else if (zk == "stage3_max_live_parameters" || zk == "stage3_max_reuse_distance" ||
                                  zk == "stage3_prefetch_bucket_size" || zk == "stage3_param_persistence_threshold" ||
                                  zk == "reduce_bucket_size" || zk == "allgather_bucket_size" || zk == "sub_group_size") {
                           limits += (limits.empty() ? "" : ", ") + zk;
                       } else if (zk != "overlap_comm" && zk != "contiguous_gradients" && zk != "allgather_partitions" &&
                                  zk != "reduce_scatter" && zk != "round_robin_gradients" && zk.rfind("stage3_", 0) != 0) {
                           r.out.unknownKeys.push_back(key);
                       }
                   }
                   if (!limits.empty())
                       r.note(k + ": " + limits + " read; DeepSpeed's own buckets and live-parameter limits are not "
                                  "modelled: ZeRO is estimated as PyTorch's (DDP buckets, FSDP2's per-layer gathers)");
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
    const bool offload = st.offloadOptimizer && *st.offloadOptimizer;
    if (st.precision && !offload)
        r.note("DeepSpeed's bf16/fp16 keeps 16-bit weights and an fp32 master copy in the optimizer: estimated as "
               "mixed precision (the same 16 bytes per parameter with AdamW)");
    if (st.precision && offload) {
        // ZeRO-Offload: the fp32 master weights live with the optimizer state on the CPU; the GPU
        // holds the 16-bit weights and gradients only (as amp, the GPU would hold fp32 weights and
        // gradients too: Mixtral-8x22B's 572.6 GiB became 1,133 GiB).
        st.precision = *st.precision == Precision::AmpFP16 ? Precision::FP16 : Precision::BF16;
        r.note("zero_optimization.offload_optimizer: the fp32 master weights and the optimizer state stay on the "
               "CPU, the GPU holds 16-bit weights and gradients: estimated as " +
               std::string(toString(*st.precision)) + " with the optimizer offloaded");
    }
}

std::string write(const std::string &, const TrainingConfig &c, std::vector<std::string> &notes)
{
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
    return jsonDocument(j);
}

} // namespace

const Format &format_deepspeed()
{
    static const Format f{TrainingFormat::DeepSpeed, "deepspeed", "DeepSpeed JSON", 1, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
