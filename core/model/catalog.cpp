#include "headroom/catalog.h"

#include <filesystem>

#include "headroom/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace headroom {

using nlohmann::json;

const std::vector<ModelArch> &modelPresets()
{
    static const std::vector<ModelArch> presets = [] {
        std::vector<ModelArch> v;
        for (const auto &r : detail::embeddedResources()) {
            const std::string name = r.name;
            if (name.rfind("models/", 0) != 0)
                continue;
            v.push_back(modelArchFromJson(json::parse(r.json)));
        }
        std::sort(v.begin(), v.end(), [](const ModelArch &a, const ModelArch &b) { return a.id < b.id; });
        return v;
    }();
    return presets;
}

const std::vector<GpuSpec> &gpuCatalog()
{
    static const std::vector<GpuSpec> gpus = [] {
        std::vector<GpuSpec> v;
        for (const auto &r : detail::embeddedResources()) {
            if (std::string(r.name) != "gpus.json")
                continue;
            const json doc = json::parse(r.json); // keep alive: the loop iterates inside it
            for (const auto &g : doc.at("gpus")) {
                GpuSpec s;
                s.id = g.at("id").get<std::string>();
                s.name = g.at("name").get<std::string>();
                s.memoryBytes = g.contains("memory_bytes")
                                    ? g.at("memory_bytes").get<int64_t>()
                                    : static_cast<int64_t>(std::llround(g.at("memory_gib").get<double>() * 1073741824.0));
                s.arch = g.value("arch", "");
                s.bf16 = g.value("bf16", true);
                v.push_back(s);
            }
        }
        return v;
    }();
    return gpus;
}

namespace {
template<typename T, typename IdOf>
[[noreturn]] void unknown(const std::string &field, const std::string &id, const std::vector<T> &all, IdOf idOf)
{
    std::string list;
    for (const auto &e : all)
        list += (list.empty() ? "" : ", ") + idOf(e);
    throw InputError(field, id, "unknown id (known: " + list + ")");
}
} // namespace

const ModelArch &findModelPreset(const std::string &id, const std::string &field)
{
    for (const auto &m : modelPresets())
        if (m.id == id)
            return m;
    unknown(field, id, modelPresets(), [](const ModelArch &m) { return m.id; });
}

const GpuSpec &findGpu(const std::string &id, const std::string &field)
{
    for (const auto &g : gpuCatalog())
        if (g.id == id)
            return g;
    unknown(field, id, gpuCatalog(), [](const GpuSpec &g) { return g.id; });
}

ModelArch resolveModel(const std::string &idOrPath, const std::string &field)
{
    const bool looksLikePath = idOrPath.find('/') != std::string::npos ||
                               (idOrPath.size() > 5 && idOrPath.compare(idOrPath.size() - 5, 5, ".json") == 0);
    if (!looksLikePath)
        return findModelPreset(idOrPath, field);
    try {
        return modelFromHfConfigFile(idOrPath);
    } catch (const InputError &e) {
        if (e.field() == "model")
            throw InputError(field, idOrPath, e.what());
        throw;
    }
}

std::string recipeModelConfigPath(const std::string &path, const std::string &field)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(path, ec);
    const fs::path target = fs::is_symlink(st) ? fs::weakly_canonical(path, ec) : fs::path(path);
    const auto endsJson = [](const std::string &n) { return n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0; };
    if (fs::is_directory(target, ec)) {
        const fs::path config = target / "config.json";
        if (!fs::is_regular_file(config, ec))
            throw InputError(field, path, "a model folder without a config.json; not read");
        return config.string();
    }
    if (fs::is_regular_file(target, ec) && endsJson(target.filename().string()))
        return target.string();
    throw InputError(field, path,
                     "a training config names its model by a Hub id, a model folder or a config.json; this is "
                     "none of them, so it is not read");
}

GpuSpec customGpu(double memoryGiB)
{
    if (!(memoryGiB > 0.0 && memoryGiB <= 65536.0))
        throw InputError("gpu_memory_gib", std::to_string(memoryGiB), "must be between 0 and 65536");
    GpuSpec g;
    g.id = "custom";
    g.name = "Custom GPU";
    g.memoryBytes = static_cast<int64_t>(std::llround(memoryGiB * 1073741824.0));
    return g;
}

} // namespace headroom
