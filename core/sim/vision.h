#pragma once
// Issue 30: a vision-language step's vision side as Transformers 5.17 runs it (vision.cpp): the
// frozen tower's forward over one call's pixels (get_image_features / get_video_features), and
// the features scattered into the embeddings. See Note [Vision step] (docs/estimator.md).
// Internal to core.

#include "ops.h"

#include "headroom/model.h"

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

// Qwen2_5_VLModel.get_image_features (or get_video_features) with the tower frozen: no node is
// recorded, each tensor goes when Python lets it go. Returns torch.cat of the merged features
// [patches / merge^2, outHidden] in `elem`, which the caller holds until the model's forward returns.
T qwen25Tower(Sim &S, const ModelArch::VisionSide &v, const TowerCall &call, int elem);

// Qwen2_5_VLModel.get_placeholder_mask for a call: the image and video masks (b x s bools each;
// returned, held until forward returns) and its checks' few bytes.
std::array<T, 2> placeholderMasks(Sim &S, int64_t tokens);

// inputs_embeds.masked_scatter(mask, features): a clone of `embeds` written through CUDA's
// masked_scatter (the mask expanded to the embeddings' shape and made contiguous, its int64
// prefix sum, CUB's scan state). Where `embeds` requires grad, MaskedScatterBackward0 saves
// `mask` and hands grad.masked_fill(mask, 0) back. `embeds` is not consumed.
T maskedScatter(Sim &S, const T &embeds, const T &mask);

} // namespace headroom::sim
