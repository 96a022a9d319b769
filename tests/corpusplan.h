#pragma once
// The corpus plan's allocator settings (lab/corpus-plan.json): the PYTORCH_CUDA_ALLOC_CONF each
// measured run was made with, by run name, for the tests that estimate the corpus's runs.

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>

inline std::map<std::string, std::string> corpusAllocConfs()
{
    std::map<std::string, std::string> conf;
    std::ifstream in(HEADROOM_SOURCE_DIR "/lab/corpus-plan.json");
    const nlohmann::json plan = nlohmann::json::parse(in);
    for (const auto &j : plan.at("jobs"))
        if (j.contains("alloc_conf") && j.at("alloc_conf").is_string())
            conf[j.at("name").get<std::string>()] = j.at("alloc_conf").get<std::string>();
    return conf;
}
