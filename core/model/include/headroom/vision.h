#pragma once
// Issue 30: what a vision-language step's pixels become (Note [Vision inputs], docs/estimator.md):
// the placeholder tokens each image and video takes in the language model's sequence, and the
// rows each sends through the vision tower, as the checkpoint's processor computes them.

#include "headroom/model.h"
#include "headroom/types.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace headroom {

struct VisionTokens
{
    int64_t imageTokens = 0;  // one image's placeholder tokens
    int64_t videoTokens = 0;  // one video's, all its blocks
    int64_t imagePatches = 0; // one image's rows through the tower
    int64_t videoPatches = 0;
    std::array<int64_t, 3> imageGrid{}; // Dynamic: (t, h, w) in patches
    std::array<int64_t, 3> videoGrid{};
    int64_t perSample = 0; // every placeholder and marker token of one sample
};

// Qwen2VLImageProcessor's smart_resize: (height, width) rounded to multiples of `factor` (Python's
// round: halves to even) within [minPixels, maxPixels]. Throws InputError(field) for an aspect
// ratio past 200, which the processor refuses.
std::pair<int64_t, int64_t> smartResize(int64_t height, int64_t width, int64_t factor, int64_t minPixels,
                                        int64_t maxPixels, const std::string &field);
// LLaMA-Factory's _preprocess_image: both sides scaled by sqrt(bound / (h w)) into [minPixels,
// maxPixels] (0: no bound), truncated.
std::pair<int64_t, int64_t> toolResize(int64_t height, int64_t width, int64_t minPixels, int64_t maxPixels);

// The tokens and tower rows of the configuration's images and videos on this model. Throws
// InputError naming the vision field for pixels the model cannot take (no tower, video on an
// image-only model) and "seq" when the sequence holds no room for them.
VisionTokens visionTokens(const ModelArch &m, const TrainingConfig &c);

// A text preset whose checkpoint also builds as a vision-language model (ModelArch::visionBuild),
// given a vision-language step (images, video, pixel bounds, a processor recipe's freezing) or a
// tool that loads the whole checkpoint (`wholeCheckpoint`): that build, and what to say about it
// (Note [Vision build], docs/estimator.md; nullopt: no change).
std::optional<std::string> takeVisionBuild(ModelArch &m, const TrainingConfig &c, bool wholeCheckpoint = false);

// A vision-language recipe's settings (pixel bounds, what it freezes) on a text model, with no
// images or video: back to the defaults, and what to say about it (nullopt: nothing to drop).
std::optional<std::string> dropVisionOfTextModel(const ModelArch &m, TrainingConfig &c);

// A recipe imported for a vision-language model states its pixel bounds, never how many images a
// sample holds (its data's): with no images or video, one image a sample at the recipe's bound
// (Note [Recipe images], docs/estimator.md), and what to say about it (nullopt: a text model, or
// images already set). Never under-estimated by a text-only guess.
std::optional<std::string> assumeRecipeImages(const ModelArch &m, TrainingConfig &c);

// Issue 30 (Note [Vision LoRA]): the vision side's Linears LoRA adapts, as the engine and
// LLaMA-Factory's patch_target_modules choose them: the request's targets by module name (or every
// Linear for all-linear), inside the parts that train (the tower where train_vision_tower, the
// projector where train_projector). Qwen2.5-VL's: per tower block attn.qkv, attn.proj,
// mlp.gate_proj, mlp.up_proj, mlp.down_proj (their in and out features), then the merger's mlp.0
// and mlp.2 (named "0" and "2": all-linear in practice), each as loraWraps says. Empty for other
// towers and full fine-tuning.
struct VisionLora
{
    static constexpr size_t kBlockLinears = 5, kMergerLinears = 2;
    std::array<bool, kBlockLinears> block{};
    std::array<bool, kMergerLinears> merger{};
    std::array<std::pair<int64_t, int64_t>, kBlockLinears> blockShapes{}; // in, out features
    std::array<std::pair<int64_t, int64_t>, kMergerLinears> mergerShapes{};
    int64_t blocks = 0;
    bool any() const;
    int64_t adapters() const; // A-and-B pairs in all
};
VisionLora visionLora(const ModelArch &m, const TrainingConfig &c);
// LoRA with a trained tower whose adapters are not simulated (every tower but Qwen2.5-VL's) and
// would adapt one of its Linears by name: the step is then refused by name.
bool visionLoraUnsimulated(const ModelArch &m, const TrainingConfig &c);

class ConfigFields;

// The towers' and projectors' parameters, from a vision_config (families' readers).
namespace vision_params {
// A composite config.json's vision_config (refused by name when missing), after its top-level
// tie_word_embeddings, which a composite states there.
const nlohmann::json &visionConfig(const ConfigFields &c, ModelArch &m);
// Qwen2.5-VL: Conv3d patches (no bias), RMSNorm blocks with a biased qkv, proj and SwiGLU MLP; the
// merger (RMSNorm, two biased Linears from merge^2 x hidden).
void qwen25(const nlohmann::json &v, int64_t textHidden, ModelArch::VisionSide &out, const std::string &ctx);
// Qwen3-VL: Conv3d patches with a bias, learned positions, LayerNorm blocks with a biased qkv,
// proj and GELU MLP; the merger, and one more per deepstack layer (each normed after the shuffle).
// Qwen3.5's tower is the same without deepstack (`deepstack` false: Qwen3_5VisionConfig deletes it).
void qwen3(const nlohmann::json &v, int64_t textHidden, ModelArch::VisionSide &out, const std::string &ctx,
           bool deepstack = true);
// SigLIP (Gemma 3) and CLIP (LLaVA) encoders; their projectors are the families'.
// Each returns the tower's parameters and sets its geometry.
int64_t siglip(const nlohmann::json &v, const std::string &ctx, ModelArch::VisionSide::Tower &tower);
int64_t clip(const nlohmann::json &v, const std::string &ctx, ModelArch::VisionSide::Tower &tower);
} // namespace vision_params

} // namespace headroom
