// The parameter counts: every tensor of the model's inventory, as stored (NF4 under QLoRA), the
// LoRA adapters, and what the optimizer keeps for the trainable ones, in its own layout.

#include "step.h"

#include "headroom/simulation.h"
#include "headroom/vision.h"

#include <algorithm>

namespace headroom::est {

namespace {
// NF4 storage of one tensor as bitsandbytes quantize_4bit packs it: two values per byte, one
// absmax per 64-value block (fp32, or 8-bit plus an fp32 absmax per 256 blocks when double-quantized).
int64_t nf4Bytes(int64_t numel, bool doubleQuant)
{
    const int64_t packed = (numel + 1) / 2;
    const int64_t blocks = (numel + 63) / 64;
    const int64_t absmax = doubleQuant ? blocks + ((blocks + 255) / 256) * 4 : blocks * 4;
    return packed + absmax;
}
} // namespace

// See Note [Optimizer state layout] (docs/estimator.md).
Params countParams(const Ctx &x)
{
    Params P;
    auto &S = P.summary;
    const auto &cfg = x.cfg;
    const int p = x.p;
    int64_t trainableBytesForState = 0;
    int64_t layerParamBytes = 0;
    // One trainable tensor class: `count` tensors of rows x cols, stored in `bytes` per value (the
    // optimizer state follows the parameter's dtype in torch.optim).
    auto addTrainable = [&](int64_t rows, int64_t cols, int bytes, int64_t count, bool inLayer) {
        const int64_t numel = checkedMul(rows, cols);
        const int64_t n = checkedMul(numel, count);
        S.trainable = checkedAdd(S.trainable, n);
        S.gradientBytes = checkedAdd(S.gradientBytes, checkedMul(n, bytes));
        S.largestTrainableBytes = std::max(S.largestTrainableBytes, checkedMul(numel, bytes));
        trainableBytesForState = checkedAdd(trainableBytesForState, checkedMul(n, bytes));
        if (inLayer) {
            P.layerGradBytes = checkedAdd(P.layerGradBytes, checkedMul(checkedMul(numel, bytes), count / x.m.numLayers));
            P.largestLayerGradTensorBytes = std::max(P.largestLayerGradTensorBytes, checkedMul(numel, bytes));
        }
        // Optimizer state, as the optimizer's file lays it out for one such tensor.
        const OptimizerStateBytes st = optimizerStateBytes(cfg, rows, cols, bytes);
        const int64_t state = checkedMul(st.device, count);
        S.pagedOptimizerStateBytes = checkedAdd(S.pagedOptimizerStateBytes, checkedMul(st.paged, count));
        S.optimizerStateBytes = checkedAdd(S.optimizerStateBytes, state);
    };
    for (const auto &t : parameterInventory(x.m)) {
        const int64_t n = checkedMul(t.numel(), t.count);
        S.total = checkedAdd(S.total, n);
        const bool inLayer = t.module != "embed_tokens" && t.module != "embed_positions" &&
                             t.module != "final_norm" && t.module != "lm_head" && t.module != "score" &&
                             t.module != "embed_tokens_per_layer" && t.module != "per_layer_model_projection" &&
                             t.module != "per_layer_projection_norm";
        // Weights, as stored (what ZeRO-3 shards and gathers back per unit)
        const bool quantized = x.qlora && t.decoderLinear && !familyTraitsOrLlama(x.m.modelType).conv1dLinears;
        const int64_t stored = quantized ? checkedMul(nf4Bytes(t.numel(), cfg.lora.doubleQuant), t.count)
                                                          : checkedMul(n, p);
        S.weightBytes = checkedAdd(S.weightBytes, stored);
        if (inLayer)
            layerParamBytes = checkedAdd(layerParamBytes, stored / x.m.numLayers);
        else
            P.rootParamBytes = checkedAdd(P.rootParamBytes, stored);
        if (x.full)
            addTrainable(t.rows, t.cols, p, t.count, inLayer);
    }
    // Issue 30: a vision-language checkpoint built whole holds its tower and projector, frozen, or
    // trained in full fine-tuning where the step says so (support.cpp says which towers); the
    // step's simulation builds them the same way.
    if (const int64_t n = visionParameterCount(x.m); n > 0) {
        S.total = checkedAdd(S.total, n);
        S.weightBytes = checkedAdd(S.weightBytes, checkedMul(n, p));
        P.rootParamBytes = checkedAdd(P.rootParamBytes, checkedMul(n, p));
        if (x.full && cfg.vision.trainTower)
            addTrainable(x.m.vision.towerParams, 1, p, 1, false);
        if (x.full && cfg.vision.trainProjector)
            addTrainable(x.m.vision.projectorParams, 1, p, 1, false);
    }
    if (!x.full) {
        // LoRA adapters on every targeted Linear: A (r x in) and B (out x r), fp32, on `count`
        // layers; `perLayer` of them in each decoder layer the per-op ledger composes.
        const int64_t r = cfg.lora.rank;
        const int64_t L = x.m.numLayers;
        auto addAdapter = [&](int64_t rows, int64_t cols, int64_t count, int64_t perLayer) {
            const int64_t numel = checkedMul(rows, cols);
            S.total = checkedAdd(S.total, checkedMul(numel, count));
            S.weightBytes = checkedAdd(S.weightBytes, checkedMul(checkedMul(numel, count), x.loraBytes));
            layerParamBytes = checkedAdd(layerParamBytes, checkedMul(checkedMul(numel, perLayer), x.loraBytes));
            addTrainable(rows, cols, x.loraBytes, count, true);
        };
        for (int mod = 0; mod < ModuleCount; ++mod) {
            if (!x.lora[mod])
                continue;
            for (const LinearGroup &g : linearModuleGroups(x.m, LinearModule(mod)))
                for (auto [rows, cols] : {std::pair{r, g.in}, std::pair{g.out, r}})
                    addAdapter(rows, cols, g.layers, g.layers / L);
        }
        // A family's own Linears: an A and a B on `count` layers for each one wrapped (`on`,
        // `shapes`: in and out features), `perLayer` of them in each layer the ledger composes.
        auto addNamed = [&](const auto &on, const auto &shapes, auto count, auto perLayer) {
            for (size_t i = 0; i < on.size(); ++i)
                if (on[i])
                    for (auto [rows, cols] : {std::pair{r, shapes[i].first}, std::pair{shapes[i].second, r}})
                        addAdapter(rows, cols, count(i), perLayer(i));
        };
        // Gemma 4's per-layer-input Linears: two in every layer, the last the model's own.
        const auto pliOn = perLayerInputLora(x.m, cfg.lora.targets);
        addNamed(pliOn, perLayerInputLinearShapes(x.m), [&](size_t i) { return i + 1 == pliOn.size() ? int64_t(1) : L; },
                 [&](size_t i) { return i + 1 == pliOn.size() ? int64_t(0) : int64_t(1); });
        // Multi-head latent attention's own Linears, on every layer.
        addNamed(mlaLora(x.m, cfg.lora.targets), mlaLinearShapes(x.m), [&](size_t) { return L; },
                 [](size_t) { return int64_t(1); });
        // Qwen3.5's gated DeltaNet Linears, on every linear-attention layer (the ledger has no
        // DeltaNet: support.cpp refuses it there).
        addNamed(linearAttentionLora(x.m, cfg.lora.targets), linearAttentionLinearShapes(x.m),
                 [&](size_t) { return x.m.linearAttentionLayerCount(); }, [](size_t) { return int64_t(0); });
        // The shared expert's gate (all-linear) and the wrapped experts' adapters, on every MoE layer.
        int64_t moeLayers = 0;
        for (int64_t l = 0; l < L; ++l)
            moeLayers += x.m.isMoeLayer(l) ? 1 : 0;
        if (sharedExpertGateLora(x.m, cfg.lora.targets))
            for (auto [rows, cols] : {std::pair{r, x.h}, std::pair{int64_t(1), r}})
                addAdapter(rows, cols, moeLayers, 1);
        for (auto [rows, cols] : expertsLoraShapes(x.m, x.experts, r))
            addAdapter(rows, cols, moeLayers, 1);
        // Note [Vision LoRA]: the adapters on the tower's blocks and merger, outside the decoder.
        const VisionLora vl = visionLora(x.m, cfg);
        addNamed(vl.block, vl.blockShapes, [&](size_t) { return vl.blocks; }, [](size_t) { return int64_t(0); });
        addNamed(vl.merger, vl.mergerShapes, [](size_t) { return int64_t(1); }, [](size_t) { return int64_t(0); });
        // A sequence classifier's score under PEFT (task_type SEQ_CLS): modules_to_save keeps the
        // frozen original and trains a copy, in the model's dtype.
        if (x.m.scoreLabels > 0) {
            const int64_t n = checkedMul(x.m.scoreLabels, x.h);
            S.total = checkedAdd(S.total, n);
            S.weightBytes = checkedAdd(S.weightBytes, checkedMul(n, p));
            P.rootParamBytes = checkedAdd(P.rootParamBytes, checkedMul(n, p));
            addTrainable(x.m.scoreLabels, x.h, p, 1, false);
        }
    }
    if (x.full) {
        P.embedGradBytes = checkedMul(checkedMul(x.V, x.h), p);
        if (x.m.learnedPositions)
            P.positionGradBytes = checkedMul(checkedMul(x.m.maxPositions, x.h), p);
        P.lmHeadGradBytes = x.m.scoreLabels > 0 ? checkedMul(checkedMul(x.m.scoreLabels, x.h), p)
                            : x.m.tiedEmbeddings ? 0
                                                 : checkedMul(checkedMul(x.V, x.h), p);
        P.finalNormGradBytes = checkedMul(checkedMul(x.h, x.m.norm == NormKind::LayerNorm ? 2 : 1), p);
    }
    P.largestLayerParamBytes = layerParamBytes;
    P.stepTemporaryBytes = optimizerStepTemporaryBytes(cfg, S.largestTrainableBytes, trainableBytesForState);
    return P;
}

ParamSummary paramsPerRank(const Params &P, const TrainingConfig &cfg)
{
    ParamSummary s = P.summary;
    const int64_t N = cfg.worldSize;
    // ZeRO-1 and up shard the optimizer state (ZeRO-Offload keeps it, sharded, on the host).
    auto perRank = [&](int64_t v) { return cfg.zeroStage >= 1 ? (v + N - 1) / N : v; };
    if (cfg.offloadOptimizer)
        s.hostOptimizerStateBytes = perRank(P.summary.optimizerStateBytes);
    s.pagedOptimizerStateBytes = perRank(P.summary.pagedOptimizerStateBytes);
    return s;
}

} // namespace headroom::est
