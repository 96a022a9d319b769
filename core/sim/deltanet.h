#pragma once
// The gated DeltaNet token mixer of Qwen3.5's linear-attention layers (Qwen3_5GatedDeltaNet in
// Transformers 5.17, without flash-linear-attention or causal-conv1d installed: its torch
// fallbacks), op by op on the autograd simulator. See Note [Gated DeltaNet] (docs/estimator.md).
// Internal to core.

#include "ops.h"

#include <functional>

namespace headroom::sim {

struct DeltaNetShape
{
    int64_t b = 1, s = 1;
    int64_t keyHeads = 1, valueHeads = 1, keyDim = 1, valueDim = 1, kernel = 4;
    int elem = 2; // the projections' outputs' bytes per element
};

struct DeltaNetWeights
{
    const T *conv = nullptr;   // conv1d.weight [conv_dim, 1, kernel]
    const T *dtBias = nullptr; // dt_bias [value heads]
    const T *aLog = nullptr;   // A_log [value heads]
    const T *norm = nullptr;   // norm.weight [value head dim] (Qwen3_5RMSNormGated)
};

// The layer's Linear modules, as DeltaNetProjection names them, run by the caller (adapters,
// 4-bit weights and autocast are the caller's).
enum class DeltaNetProjection { Qkv, Z, B, A, Out };
using DeltaNetLinear = std::function<T(const T &x, DeltaNetProjection which)>;

// Qwen3_5GatedDeltaNet.forward over the normalised hidden states `x` (b, s, hidden): the
// projections, the depthwise causal convolution, the gates, torch_chunk_gated_delta_rule in fp32
// (chunks of 64 tokens, a sequential scan over the chunks), the gated RMSNorm and out_proj.
T gatedDeltaNet(Ops &O, const DeltaNetShape &d, const DeltaNetWeights &w, const T &x, const DeltaNetLinear &linear);

} // namespace headroom::sim
