#pragma once
// Reads tests/data/hf_reference_h200.json (written by bench/hf_reference.py on the H200).

#include "headroom/catalog.h"
#include "headroom/estimator.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace headroom::testing {

struct HfCase
{
    std::string name;
    ModelArch model;
    TrainingConfig config;
    int64_t forwardPeak = 0, backwardPeak = 0, optimizerPeak = 0;
    int64_t peakReserved = 0;
    int64_t nvmlUsed = 0;
    int64_t peakAllocated() const { return std::max({forwardPeak, backwardPeak, optimizerPeak}); }
};

inline std::vector<HfCase> loadHfReference(const std::string &path)
{
    std::ifstream in(path);
    const auto doc = nlohmann::json::parse(in);
    std::vector<HfCase> out;
    for (const auto &r : doc.at("results")) {
        if (!r.contains("steps") || r.at("steps").empty() || !r.at("oom").is_null())
            continue;
        const auto &s = r.at("spec");
        HfCase c;
        c.name = s.at("name").get<std::string>();
        c.model = findModelPreset(s.at("model").get<std::string>());
        TrainingConfig &t = c.config;
        t.precision = parsePrecision(s.at("precision").get<std::string>());
        t.optimizer = parseOptimizer(s.at("optimizer").get<std::string>());
        t.optimizerImpl = parseOptimizerImpl(s.at("optimizer_impl").get<std::string>());
        t.finetune = parseFineTune(s.at("finetune").get<std::string>());
        t.microBatch = s.at("batch").get<int64_t>();
        t.seqLen = s.at("seq").get<int64_t>();
        t.gradCheckpointing = s.at("grad_checkpointing").get<bool>();
        t.attention = parseAttention(s.at("attention").get<std::string>());
        t.lora.rank = s.at("lora_rank").get<int>();
        t.lora.alpha = s.at("lora_alpha").get<double>();
        t.lora.dropout = s.at("lora_dropout").get<double>();
        t.lora.targets = s.at("lora_targets").get<std::vector<std::string>>();
        const auto &st = r.at("steps").back(); // steady state: the last measured step
        c.forwardPeak = st.at("forward").at("peak_allocated").get<int64_t>();
        c.backwardPeak = st.at("backward").at("peak_allocated").get<int64_t>();
        c.optimizerPeak = st.at("optimizer").at("peak_allocated").get<int64_t>();
        for (const char *p : {"forward", "backward", "optimizer"})
            c.peakReserved = std::max(c.peakReserved, st.at(p).at("peak_reserved").get<int64_t>());
        c.nvmlUsed = st.value("nvml_used", int64_t{0});
        out.push_back(std::move(c));
    }
    return out;
}

} // namespace headroom::testing
