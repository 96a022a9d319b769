// Issue 30: a vision-language checkpoint's tokens and tower parameters (headroom/vision.h).
#include "headroom/vision.h"

#include <algorithm>

#include "family.h"

#include "headroom/catalog.h"
#include "headroom/error.h"

#include <cmath>
#include <string>

namespace headroom {

std::pair<int64_t, int64_t> smartResize(int64_t height, int64_t width, int64_t factor, int64_t minPixels,
                                        int64_t maxPixels, const std::string &field)
{
    const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
    if (std::max(h, w) / std::min(h, w) > 200.0)
        throw InputError(field, std::to_string(height) + "x" + std::to_string(width),
                         "has an aspect ratio past 200, which the processor refuses");
    // Python's round() takes halves to even, as nearbyint does in the default rounding mode
    auto hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
    auto wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
    if (hb * wb > maxPixels) {
        const double beta = std::sqrt(h * w / static_cast<double>(maxPixels));
        hb = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
        wb = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
    } else if (hb * wb < minPixels) {
        const double beta = std::sqrt(static_cast<double>(minPixels) / (h * w));
        hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
        wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
    }
    return {hb, wb};
}

std::pair<int64_t, int64_t> toolResize(int64_t height, int64_t width, int64_t minPixels, int64_t maxPixels)
{
    double h = static_cast<double>(height), w = static_cast<double>(width);
    if (maxPixels > 0 && h * w > static_cast<double>(maxPixels)) {
        const double f = std::sqrt(static_cast<double>(maxPixels) / (h * w));
        h = std::trunc(h * f);
        w = std::trunc(w * f);
    }
    if (minPixels > 0 && h * w < static_cast<double>(minPixels)) {
        const double f = std::sqrt(static_cast<double>(minPixels) / (h * w));
        h = std::trunc(h * f);
        w = std::trunc(w * f);
    }
    return {std::max<int64_t>(1, static_cast<int64_t>(h)), std::max<int64_t>(1, static_cast<int64_t>(w))};
}

namespace {
// One image (frames 1) or video through Qwen2VLImageProcessor: (t, h, w) in patches.
std::array<int64_t, 3> dynamicGrid(const ModelArch::VisionSide &v, int64_t height, int64_t width, int64_t toolMin,
                                   int64_t toolMax, int64_t procMin, int64_t procMax, int64_t frames,
                                   const std::string &field)
{
    const auto [h, w] = toolResize(height, width, toolMin, toolMax);
    const auto [hh, ww] = smartResize(h, w, v.patch * v.merge, procMin, procMax, field);
    // the processor repeats the last frame to a whole temporal patch
    return {(frames + v.temporalPatch - 1) / v.temporalPatch, hh / v.patch, ww / v.patch};
}
} // namespace

VisionTokens visionTokens(const ModelArch &m, const TrainingConfig &c)
{
    const auto &in = c.vision;
    const auto &v = m.vision;
    VisionTokens t;
    if (!in.any())
        return t;
    const bool built = familyTraitsOrLlama(m.modelType).visionLanguage && v.present();
    if (!built)
        throw InputError(in.images > 0 ? "vision.images" : "vision.videos",
                         std::to_string(in.images > 0 ? in.images : in.videos),
                         m.modelType + " is a text model: it takes no images or video");
    if (in.videos > 0 && !v.video)
        throw InputError("vision.videos", std::to_string(in.videos), m.modelType + " takes no video");
    if (v.tokens == ModelArch::VisionSide::Tokens::Dynamic) {
        const int64_t merge2 = v.merge * v.merge;
        if (in.images > 0) {
            t.imageGrid = dynamicGrid(v, in.imageHeight, in.imageWidth, in.minPixels, in.maxPixels, v.minPixels,
                                      v.maxPixels, 1, "vision.image_size");
            t.imagePatches = t.imageGrid[0] * t.imageGrid[1] * t.imageGrid[2];
            t.imageTokens = t.imagePatches / merge2;
        }
        if (in.videos > 0) {
            t.videoGrid = dynamicGrid(v, in.videoHeight, in.videoWidth, in.videoMinPixels, in.videoMaxPixels,
                                      v.videoMinPixels, v.videoMaxPixels, in.videoFrames, "vision.video_size");
            t.videoPatches = t.videoGrid[0] * t.videoGrid[1] * t.videoGrid[2];
            t.videoTokens = t.videoPatches / merge2;
        }
    } else {
        t.imagePatches = (v.imageSize / v.patch) * (v.imageSize / v.patch);
        t.imageTokens = v.tokensPerImage;
    }
    const int64_t videoBlocks = v.perFrameVideo ? t.videoGrid[0] : 1;
    t.perSample = checkedAdd(checkedMul(in.images, t.imageTokens + v.markers),
                             checkedMul(in.videos, checkedAdd(t.videoTokens, checkedMul(videoBlocks, v.markers))));
    if (t.perSample + 1 > c.seqLen) {
        std::string each = in.images > 0 ? std::to_string(t.imageTokens) + " per image" : std::string();
        if (in.videos > 0)
            each += (each.empty() ? "" : ", ") + std::to_string(t.videoTokens) + " per video";
        throw InputError("seq", std::to_string(c.seqLen),
                         "holds no room for the sample's images and videos: they take " + std::to_string(t.perSample) +
                             " tokens (" + each + ")");
    }
    return t;
}

// See Note [Vision build] (docs/estimator.md).
std::optional<std::string> takeVisionBuild(ModelArch &m, const TrainingConfig &c, bool wholeCheckpoint)
{
    if (m.visionBuild.empty() || (c.vision.isDefault() && !wholeCheckpoint))
        return std::nullopt;
    const std::string text = m.id;
    m = findModelPreset(m.visionBuild, "model.headroom.vision_build");
    return text + (c.vision.isDefault() ? " as the recipe's tool loads it, the whole checkpoint"
                                        : " with images or a vision-language recipe's settings") +
           ": its " + m.modelType + " vision-language model (" + m.id + ", the vision tower included)";
}

std::optional<std::string> dropVisionOfTextModel(const ModelArch &m, TrainingConfig &c)
{
    if (c.vision.isDefault() || c.vision.any() || familyTraitsOrLlama(m.modelType).visionLanguage)
        return std::nullopt;
    c.vision = TrainingConfig::Vision{};
    return "the image and video settings are a vision-language recipe's; " + m.modelType +
           " is a text model, so they are not used (its step has no images)";
}

bool VisionLora::any() const
{
    return std::find(block.begin(), block.end(), true) != block.end() ||
           std::find(merger.begin(), merger.end(), true) != merger.end();
}

int64_t VisionLora::adapters() const
{
    return blocks * std::count(block.begin(), block.end(), true) + std::count(merger.begin(), merger.end(), true);
}

// See Note [Vision LoRA] (docs/estimator.md).
VisionLora visionLora(const ModelArch &m, const TrainingConfig &c)
{
    VisionLora out;
    const auto &t = m.vision.tower;
    if (!m.vision.present() || c.finetune == FineTune::Full || t.kind != ModelArch::VisionSide::Tower::Kind::Qwen25)
        return out;
    const int64_t H = t.hidden, I = t.inter, M = H * m.vision.merge * m.vision.merge;
    out.blockShapes = {{{H, 3 * H}, {H, H}, {H, I}, {H, I}, {I, H}}};
    out.mergerShapes = {{{M, M}, {M, t.outHidden}}};
    out.blocks = t.depth;
    if (c.vision.trainTower) {
        const char *names[VisionLora::kBlockLinears] = {"qkv", "proj", "gate_proj", "up_proj", "down_proj"};
        for (size_t i = 0; i < out.block.size(); ++i)
            out.block[i] = loraWraps(names[i], c.lora.targets);
    }
    if (c.vision.trainProjector) // the merger's mlp.0 and mlp.2
        out.merger = {loraWraps("0", c.lora.targets), loraWraps("2", c.lora.targets)};
    return out;
}

bool visionLoraUnsimulated(const ModelArch &m, const TrainingConfig &c)
{
    using Kind = ModelArch::VisionSide::Tower::Kind;
    if (!m.vision.present() || c.finetune == FineTune::Full || !c.vision.trainTower || m.vision.tower.kind == Kind::Qwen25)
        return false;
    // Where no tower Linear bears a targeted name, PEFT adapts none of them and freezes the rest:
    // the tower then runs frozen (Qwen3-VL's qkv, proj, linear_fc1, linear_fc2 under a recipe's
    // q_proj ... down_proj); SigLIP's and CLIP's q_proj, k_proj, v_proj match
    const std::vector<std::string> names = m.vision.tower.kind == Kind::Qwen3
                                               ? std::vector<std::string>{"qkv", "proj", "linear_fc1", "linear_fc2"}
                                               : std::vector<std::string>{"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
    return std::any_of(names.begin(), names.end(), [&](const std::string &n) { return loraWraps(n, c.lora.targets); });
}

// See Note [Recipe images] (docs/estimator.md).
std::optional<std::string> assumeRecipeImages(const ModelArch &m, TrainingConfig &c)
{
    if (!m.vision.present() || c.vision.any())
        return std::nullopt;
    c.vision.images = 1;
    std::string size;
    if (m.vision.tokens == ModelArch::VisionSide::Tokens::Fixed) {
        c.vision.imageHeight = c.vision.imageWidth = m.vision.imageSize;
        size = "every image resized to the tower's " + std::to_string(m.vision.imageSize) + "x" +
               std::to_string(m.vision.imageSize);
    } else if (c.vision.maxPixels > 0) { // an image past the bound is scaled down to it: the largest a sample holds
        const auto side = static_cast<int64_t>(std::floor(std::sqrt(static_cast<double>(c.vision.maxPixels))));
        c.vision.imageHeight = c.vision.imageWidth = std::max<int64_t>(side, 1);
        size = std::to_string(side) + "x" + std::to_string(side) + ", the recipe's pixel bound";
    } else {
        size = std::to_string(c.vision.imageHeight) + "x" + std::to_string(c.vision.imageWidth) +
               " (no pixel bound in the recipe: larger images cost more)";
    }
    return "images per sample: a recipe does not say (its data does); estimated with 1 image a sample, " + size +
           ". Set the images (0 for text-only data) and their size to match your data";
}

namespace vision_params {
const nlohmann::json &visionConfig(const ConfigFields &c, ModelArch &m)
{
    if (!c.has("vision_config") || !c.json().at("vision_config").is_object())
        c.refuse("vision_config", "(missing)", "describes the vision tower of a vision-language checkpoint");
    m.tiedEmbeddings = c.boolean("tie_word_embeddings", m.tiedEmbeddings);
    return c.json().at("vision_config");
}

namespace {
struct Sizes
{
    int64_t hidden, inter, depth, patch, temporal, channels, merge, out;
};

Sizes sizes(const ConfigFields &v, int64_t textHidden, int64_t hiddenDefault, int64_t interDefault,
            int64_t depthDefault, int64_t patchDefault)
{
    Sizes s{v.integer("hidden_size", hiddenDefault), v.integer("intermediate_size", interDefault),
            v.integer("depth", depthDefault), v.integer("patch_size", patchDefault),
            v.integer("temporal_patch_size", 2),
            v.has("in_channels") ? v.integer("in_channels") : v.integer("in_chans", 3),
            v.integer("spatial_merge_size", 2), v.integer("out_hidden_size", textHidden)};
    for (auto [key, x] : {std::pair{"hidden_size", s.hidden}, {"intermediate_size", s.inter}, {"depth", s.depth},
                          {"patch_size", s.patch}, {"temporal_patch_size", s.temporal}, {"in_channels", s.channels},
                          {"out_hidden_size", s.out}})
        if (x > (int64_t(1) << 16))
            v.refuse(key, std::to_string(x), "is implausibly large (limit 65536)");
    if (s.merge > 64)
        v.refuse("spatial_merge_size", std::to_string(s.merge), "is implausibly large (limit 64)");
    return s;
}

// A merger: its norm's parameters, then Linear(M, M) and Linear(M, out), M = hidden x merge^2.
int64_t merger(const Sizes &s, int64_t normParams)
{
    const int64_t M = checkedMul(s.hidden, s.merge * s.merge);
    return checkedAdd(normParams, checkedAdd(checkedAdd(checkedMul(M, M), M), checkedAdd(checkedMul(M, s.out), s.out)));
}

// A Qwen tower's blocks: depth, widths, heads, the patch rows and the merger's output.
void qwenGeometry(const ConfigFields &v, const Sizes &s, ModelArch::VisionSide::Tower &t)
{
    t.depth = s.depth;
    t.hidden = s.hidden;
    t.inter = s.inter;
    t.heads = v.integer("num_heads", 16);
    if (t.heads < 1 || s.hidden % t.heads != 0)
        v.refuse("num_heads", std::to_string(t.heads), "must divide hidden_size (" + std::to_string(s.hidden) + ")");
    t.inputWidth = s.channels * s.temporal * s.patch * s.patch;
    t.outHidden = s.out;
}

// A list of block indexes (fullatt_block_indexes, deepstack_visual_indexes), each below depth;
// without the key, the configuration class's default cut to the depth.
std::vector<int64_t> blockIndexes(const ConfigFields &v, const nlohmann::json &j, const char *key, int64_t depth,
                                  std::vector<int64_t> fallback)
{
    if (!v.has(key)) {
        fallback.erase(std::remove_if(fallback.begin(), fallback.end(), [&](int64_t i) { return i >= depth; }),
                       fallback.end());
        return fallback;
    }
    const auto &f = j.at(key);
    if (!f.is_array() || f.size() > 1024)
        v.refuse(key, f.dump().substr(0, 40), "must be a list of block indexes");
    std::vector<int64_t> out;
    for (const auto &i : f) {
        if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= depth)
            v.refuse(key, i.dump().substr(0, 40), "must hold block indexes below depth (" + std::to_string(depth) + ")");
        out.push_back(i.get<int64_t>());
    }
    return out;
}

void dynamic(const Sizes &s, ModelArch::VisionSide &out)
{
    out.tokens = ModelArch::VisionSide::Tokens::Dynamic;
    out.patch = s.patch;
    out.merge = s.merge;
    out.temporalPatch = s.temporal;
    out.markers = 2; // vision_start, vision_end
    out.video = true;
}
} // namespace

void qwen25(const nlohmann::json &j, int64_t textHidden, ModelArch::VisionSide &out, const std::string &ctx)
{
    const ConfigFields v(j, ctx);
    const Sizes s = sizes(v, textHidden, 1280, 3420, 32, 14);
    const int64_t H = s.hidden, I = s.inter;
    const int64_t block = 2 * H + (3 * H * H + 3 * H) + (H * H + H) + 2 * (H * I + I) + (I * H + H);
    out.towerParams = checkedAdd(checkedMul(s.channels * s.temporal * s.patch * s.patch, H), checkedMul(s.depth, block));
    out.projectorParams = merger(s, H);
    dynamic(s, out);
    ModelArch::VisionSide::Tower &t = out.tower;
    qwenGeometry(v, s, t);
    t.windowSize = v.integer("window_size", 112);
    if (t.windowSize < s.patch * s.merge || t.windowSize > (int64_t(1) << 16))
        v.refuse("window_size", std::to_string(t.windowSize),
                 "must be at least patch_size x spatial_merge_size (" + std::to_string(s.patch * s.merge) + ") and at most 65536");
    t.fullAttention = blockIndexes(v, j, "fullatt_block_indexes", s.depth, {7, 15, 23, 31}); // Qwen2_5_VLVisionConfig's
}

void qwen3(const nlohmann::json &j, int64_t textHidden, ModelArch::VisionSide &out, const std::string &ctx,
           bool deepstack)
{
    const ConfigFields v(j, ctx);
    const Sizes s = sizes(v, textHidden, 1152, 4304, 27, 16);
    const int64_t H = s.hidden, I = s.inter;
    const int64_t positions = v.integer("num_position_embeddings", 2304);
    if (positions > (int64_t(1) << 24))
        v.refuse("num_position_embeddings", std::to_string(positions), "is implausibly large (limit 16777216)");
    const int64_t block = 4 * H + (3 * H * H + 3 * H) + (H * H + H) + (H * I + I) + (I * H + H);
    out.towerParams = checkedAdd(checkedAdd(checkedMul(s.channels * s.temporal * s.patch * s.patch + 1, H),
                                            checkedMul(positions, H)),
                                 checkedMul(s.depth, block));
    ModelArch::VisionSide::Tower &t = out.tower;
    t = {};
    if (deepstack)
        t.deepstack = blockIndexes(v, j, "deepstack_visual_indexes", s.depth, {8, 16, 24}); // Qwen3VLVisionConfig's
    const int64_t M = checkedMul(H, s.merge * s.merge);
    out.projectorParams =
        checkedAdd(merger(s, 2 * H), checkedMul(static_cast<int64_t>(t.deepstack.size()), merger(s, 2 * M)));
    dynamic(s, out);
    t.kind = ModelArch::VisionSide::Tower::Kind::Qwen3;
    t.checkpointHooked = false; // Qwen3VLVisionModel's patch embedding is not hooked (its timelines)
    qwenGeometry(v, s, t);
    t.positionEmbeddings = positions;
}

namespace {
// A ViT encoder's layers (SigLIP's and CLIP's): two LayerNorms, q, k, v, out and a two-Linear MLP,
// biased; the geometry goes to `t`.
int64_t vitLayers(const ConfigFields &v, ModelArch::VisionSide::Tower &t, int64_t &patch, int64_t &image)
{
    const int64_t H = v.integer("hidden_size", 768);
    const int64_t I = v.integer("intermediate_size", 3072), L = v.integer("num_hidden_layers", 12);
    patch = v.integer("patch_size", 16);
    image = v.integer("image_size", 224);
    const int64_t channels = v.integer("num_channels", 3);
    for (auto [key, x] : {std::pair{"hidden_size", H}, {"intermediate_size", I}, {"num_hidden_layers", L},
                          {"patch_size", patch}, {"image_size", image}, {"num_channels", channels}})
        if (x > (int64_t(1) << 16))
            v.refuse(key, std::to_string(x), "is implausibly large (limit 65536)");
    if (patch > image)
        v.refuse("patch_size", std::to_string(patch), "is larger than image_size (" + std::to_string(image) + ")");
    t = {};
    t.depth = L;
    t.hidden = H;
    t.inter = I;
    t.inputWidth = channels;
    t.heads = v.integer("num_attention_heads", 12);
    if (t.heads < 1 || H % t.heads != 0)
        v.refuse("num_attention_heads", std::to_string(t.heads), "must divide hidden_size (" + std::to_string(H) + ")");
    return checkedMul(L, 4 * H + 4 * (H * H + H) + (H * I + I) + (I * H + H));
}
} // namespace

int64_t siglip(const nlohmann::json &j, const std::string &ctx, ModelArch::VisionSide::Tower &t)
{
    const ConfigFields v(j, ctx);
    int64_t patch, image;
    const int64_t layers = vitLayers(v, t, patch, image);
    t.kind = ModelArch::VisionSide::Tower::Kind::Siglip;
    const int64_t H = t.hidden, positions = (image / patch) * (image / patch);
    // patch Conv2d with a bias, learned positions, the layers, post_layernorm (no head: vision_use_head false)
    return checkedAdd(checkedAdd(checkedMul(t.inputWidth * patch * patch + 1, H), checkedMul(positions, H)),
                      checkedAdd(layers, 2 * H));
}

int64_t clip(const nlohmann::json &j, const std::string &ctx, ModelArch::VisionSide::Tower &t)
{
    const ConfigFields v(j, ctx);
    int64_t patch, image;
    const int64_t layers = vitLayers(v, t, patch, image);
    t.kind = ModelArch::VisionSide::Tower::Kind::Clip;
    t.quickGelu = v.string("hidden_act", "quick_gelu") == "quick_gelu";
    const int64_t H = t.hidden, positions = (image / patch) * (image / patch) + 1;
    // class embedding, patch Conv2d without a bias, positions, pre_layrnorm, the layers, post_layernorm
    return checkedAdd(checkedAdd(H + checkedMul(t.inputWidth * patch * patch, H), checkedMul(positions, H)),
                      checkedAdd(layers, 4 * H));
}
} // namespace vision_params

} // namespace headroom
