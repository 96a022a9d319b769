#pragma once
// Issue 30: a vision-language step's vision side as Transformers 5.17 runs it (vision.cpp): the
// frozen tower's forward over one call's pixels (get_image_features / get_video_features), the
// features scattered into the embeddings, and Qwen3-VL's deepstack. See Note [Vision step] (docs/estimator.md).
// Internal to core.

#include "ops.h"

#include "headroom/model.h"
#include "headroom/vision.h"

#include <array>
#include <vector>

namespace headroom::sim {

// One call of the tower: `blocks` images (or videos) of `grid` (t, h, w) patches each.
struct TowerCall
{
    std::array<int64_t, 3> grid{};
    int64_t blocks = 0;
    int64_t patches() const { return blocks * grid[0] * grid[1] * grid[2]; }
};

// Shared by vision.cpp and vision_graph.cpp: a frame's chunks of windowed attention
// (get_vision_window_index), whether the tower is Qwen3-VL's, and the 2-D rotary tables {cos, sin}
// (fp32, N x head size).
void windowChunks(const ModelArch::VisionSide &v, int64_t h, int64_t w, std::vector<int64_t> &out);
bool qwen3(const ModelArch::VisionSide &v);
std::array<T, 2> rotaryTables(Sim &S, int64_t N, int64_t hd);
// Qwen2.5-VL's tables gathered into window order; a call's attention chunks (whole frames; its
// frames' windows, and whole frames); get_image_features' split sizes (a few bytes).
std::array<T, 2> windowedRotaryTables(Sim &S, int64_t N, int64_t hd, int64_t merged);
std::vector<int64_t> frameChunks(const TowerCall &call);
void attentionChunks(const ModelArch::VisionSide &v, const TowerCall &call, std::vector<int64_t> &windows,
                     std::vector<int64_t> &frames);
void splitSizes(Sim &S, const TowerCall &call);

// The tower's and projector's parameters (and buffers) in the order the model's __init__ makes
// them, frozen, in `elem`; their count checked against the reader's (towerParams + projectorParams).
// Parameters of a trained part (the tower's, the projector's) require grad.
std::vector<T> towerWeights(Sim &S, const ModelArch::VisionSide &v, int64_t textHidden, int elem, bool trainTower = false,
                            bool trainProjector = false);

// Qwen2_5_VLModel.get_image_features (or get_video_features) with the tower frozen: no node is
// recorded, each tensor goes when Python lets it go. Returns torch.cat of the merged features
// [patches / merge^2, outHidden] in `elem`, which the caller holds until the model's forward returns.
T qwen25Tower(Sim &S, const ModelArch::VisionSide &v, const TowerCall &call, int elem);

// How the tower runs: its weights trained, the projector's trained, its patch embedding hooked
// (gradient checkpointing's enable_input_require_grads), its layers checkpointed.
struct TowerMode
{
    bool towerTrained = false, projectorTrained = false, hooked = false, checkpointed = false;
};

// Note [Vision LoRA]: the tower's adapters, lora_A then lora_B for each Linear `on` says, block by
// block in module order, then the merger's; the request's rank and dropout.
struct TowerLora
{
    VisionLora on;
    std::vector<T> adapters;
    int64_t rank = 0;
    double dropout = 0.0;
    bool any() const { return on.any(); }
};

// A patch embedding's convolution as a node on its made output `conv` (vision_vit.cpp): it keeps
// the cast pixels and its weight; its backward makes the weight's (and bias's) gradient.
void convolutionNode(Sim &S, T &conv, const T &pixels, const T &weight, const T *bias);

// qwen25Tower with the tower in the autograd graph: its weights trained (patch_embed a node), or
// gradient checkpointing's input hook on patch_embed (its output a leaf that requires grad);
// every block checkpointed where mode.checkpointed; the merger as nodes (`w`, towerWeights').
// With LoRA on the tower (`lora`, may be null), each adapted Linear adds its adapter's output.
T qwen25TowerGraph(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerCall &call, int elem,
                   const TowerMode &mode, const TowerLora *lora = nullptr);

// Qwen3VLModel.get_image_features (or get_video_features) with the tower frozen, as its forward
// leaves it: `features` is torch.cat of the merged features; `deepstack` the deepstack mergers'
// outputs, one a deepstack block; `locals` what the output object keeps (last_hidden_state, the
// merger's output under the split). All are held until the model's forward returns.
struct TowerOutput
{
    T features;
    std::vector<T> deepstack, locals;
};
TowerOutput qwen3Tower(Sim &S, const ModelArch::VisionSide &v, const TowerCall &call, int elem);

// qwen3Tower as nodes, its weights trained (full fine-tuning; Qwen3-VL's tower is not hooked by
// gradient checkpointing): patch_embed a node, the learned positions' embedding, product and sum
// as nodes, each block (sim::blockGraph's Qwen3-VL layout), the deepstack mergers and the merger.
TowerOutput qwen3TowerGraph(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerCall &call,
                            int elem);

// Qwen3VLTextModel._deepstack_process after a decoder layer: hidden_states.clone(), the visual
// rows gathered (hidden_states[mask]) plus `visual` ([rows, hidden], frozen), written back with
// index_put_. `h` [b, s, hidden] is not consumed; the new hidden states are returned.
T deepstackAdd(Sim &S, const T &h, const T &mask, const T &visual);

// Gemma3Model.get_image_features (vision_vit.cpp): `images` images through the SigLIP encoder and
// post_layernorm, then Gemma3MultiModalProjector (`w`: towerWeights'); without autograd where
// nothing in it needs a gradient, else as nodes. Returns the projected features
// [images x tokensPerImage, textHidden] in `elem`.
T siglipFeatures(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerMode &mode,
                 int64_t images, int64_t textHidden, int elem);

// LlavaModel.get_image_features and its torch.cat with the CLIP tower frozen (vision_vit.cpp):
// `images` images through the encoder (every hidden state kept until it returns), the projector
// over the selected layers' patches; returns the features [images x tokensPerImage, textHidden].
// The tower runs without autograd (its training is not simulated); the projector as nodes where
// it trains (`w`: towerWeights').
T clipFeatures(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerMode &mode,
               int64_t images, int64_t textHidden, int elem);

// Gemma3Model.forward's create_masks_for_vision_model (token_type_ids given): the full layers'
// and the sliding layers' boolean (b, 1, s, s) masks, each causal or within an image's block.
std::array<T, 2> blockCausalMasks(Sim &S, int64_t b, int64_t s);

// get_placeholder_mask for a call: `kinds` masks (b x s bools each: the image's, and Qwen's
// video's; returned, held until forward returns) and its checks' few bytes.
std::vector<T> placeholderMasks(Sim &S, int64_t tokens, int kinds);

// inputs_embeds.masked_scatter(mask, features): a clone of `embeds` written through CUDA's
// masked_scatter (the mask expanded to the embeddings' shape and made contiguous, its int64
// prefix sum, CUB's scan state). Where `embeds` requires grad, MaskedScatterBackward0 saves
// `mask` and hands grad.masked_fill(mask, 0) back. `embeds` is not consumed.
// Where `source` (the features) requires grad, its gradient is masked_scatter_backward's
// grad.masked_select(mask): the mask made dense, nonzero()'s (elements, 3) int64 index, the values.
T maskedScatter(Sim &S, const T &embeds, const T &mask, const T *source = nullptr);

} // namespace headroom::sim
