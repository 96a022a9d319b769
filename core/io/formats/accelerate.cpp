// accelerate's config YAML: the launch (distributed type, processes, mixed precision) and its
// DeepSpeed or FSDP section; batch, sequence and model are the training script's.

#include "../format.h"

#include "headroom/error.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace headroom::formats {

namespace {

bool detects(const json &j)
{
    return j.contains("distributed_type") || j.contains("compute_environment");
}

void read(Reader &r, const json &j)
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
                               r.out.settings.gradAccum = r.integer(key, dv, 1, kMaxGradAccum);
                       } else if (dk == "deepspeed_config_file")
                           readDeepSpeedPath(r, key, dv);
                       else if (dk != "zero3_init_flag" && dk != "zero3_save_16bit_model" && dk != "gradient_clipping" &&
                                dk != "deepspeed_multinode_launcher")
                           r.out.unknownKeys.push_back(key);
                   }
               }},
              {"parallelism_config", [](Reader &r, const std::string &k, const json &v) {
                   if (!v.is_object())
                       return;
                   // accelerate's ParallelismConfig: FSDP shards over dp_shard_size GPUs.
                   for (const auto &[pk, pv] : v.items()) {
                       const std::string key = k + "." + pk;
                       const std::string bare = pk.rfind("parallelism_config_", 0) == 0 ? pk.substr(19) : pk;
                       if (bare == "dp_shard_size")
                           r.out.settings.worldSize = static_cast<int>(r.integer(key, pv, 1, 65536));
                       else if (bare == "tp_size" || bare == "cp_size")
                           readUnmodelledParallel(r, key, pv);
                       else if (bare == "dp_replicate_size")
                           readReplicas(r, key, pv);
                       else if (bare != "cp_handler" && bare != "cp_backend")
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
    if (processes > 0 && !st.worldSize) // parallelism_config's dp_shard_size, when given, is the sharding degree
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

std::string write(const std::string &, const TrainingConfig &c, std::vector<std::string> &notes)
{
    YAML::Emitter y;
    y << YAML::BeginMap;
    kv(y, "compute_environment", "LOCAL_MACHINE");
    const bool ds = c.zeroStage == 1 || c.offloadOptimizer;
    kv(y, "distributed_type", ds ? "DEEPSPEED" : c.zeroStage >= 2 ? "FSDP" : c.worldSize > 1 ? "MULTI_GPU" : "NO");
    kv(y, "num_machines", 1);
    kv(y, "num_processes", c.worldSize);
    kv(y, "mixed_precision", c.precision == Precision::AmpBF16 || c.precision == Precision::BF16   ? "bf16"
                             : c.precision == Precision::AmpFP16 || c.precision == Precision::FP16 ? "fp16"
                                                                                                     : "no");
    if (c.precision == Precision::BF16 || c.precision == Precision::FP16)
        notes.push_back("accelerate's mixed_precision autocasts; the 16-bit weights come from the script's torch_dtype");
    if (ds) {
        y << YAML::Key << "deepspeed_config" << YAML::Value << YAML::BeginMap;
        kv(y, "zero_stage", c.zeroStage);
        kv(y, "offload_optimizer_device", c.offloadOptimizer ? "cpu" : "none");
        kv(y, "offload_param_device", "none");
        kv(y, "gradient_accumulation_steps", c.gradAccum);
        y << YAML::EndMap;
    } else if (c.zeroStage >= 2) {
        y << YAML::Key << "fsdp_config" << YAML::Value << YAML::BeginMap;
        kv(y, "fsdp_version", 2);
        kv(y, "fsdp_reshard_after_forward", c.zeroStage == 3);
        kv(y, "fsdp_activation_checkpointing", c.gradCheckpointing);
        kv(y, "fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP");
        kv(y, "fsdp_offload_params", false);
        kv(y, "fsdp_cpu_ram_efficient_loading", true);
        kv(y, "fsdp_state_dict_type", "SHARDED_STATE_DICT");
        y << YAML::EndMap;
    }
    notes.push_back("accelerate's config carries the launch only: batch, sequence length and the model are the "
                    "training script's");
    y << YAML::EndMap;
    return yamlDocument(y, notes);
}

} // namespace

const Format &format_accelerate()
{
    static const Format f{TrainingFormat::Accelerate, "accelerate", "accelerate config YAML", 2, &detects, &read, &write};
    return f;
}

} // namespace headroom::formats
