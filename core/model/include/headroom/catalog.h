#pragma once

#include "headroom/model.h"

#include <optional>

namespace headroom {

struct GpuSpec
{
    std::string id;
    std::string name;
    int64_t memoryBytes = 0;
    std::string arch;
    bool bf16 = true;
};

// The built-in catalogs (resources/models/*.json and resources/gpus.json, embedded at build time).
const std::vector<ModelArch> &modelPresets();
const std::vector<GpuSpec> &gpuCatalog();

// Look-ups throw InputError naming `field` and listing close ids.
const ModelArch &findModelPreset(const std::string &id, const std::string &field = "model");
const GpuSpec &findGpu(const std::string &id, const std::string &field = "gpu");

// A preset id, or a path to a Hugging Face config.json (anything with a '/' or ending in .json).
ModelArch resolveModel(const std::string &idOrPath, const std::string &field = "model");
// A model a training config names by a local path (`base_model`, `model_name_or_path`): a model
// folder (its config.json) or a file whose name ends in .json, nothing else, so that a recipe can
// make Headroom read neither /etc/shadow nor a FIFO (issue 32, row 9). Returns the config.json's
// path; throws InputError naming `field` otherwise, before anything is read.
std::string recipeModelConfigPath(const std::string &path, const std::string &field);

// A custom card for "what if I had N GiB".
GpuSpec customGpu(double memoryGiB);

namespace detail {
struct EmbeddedResource
{
    const char *name;
    const char *json;
};
const std::vector<EmbeddedResource> &embeddedResources();
} // namespace detail

} // namespace headroom
