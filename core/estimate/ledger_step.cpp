// The per-op ledger's step (LedgerStep): after load, forward, head, backward and the optimizer
// step, each a member over the composed layers (ledger_layer.cpp).

#include "ledger.h"

#include "headroom/simulation.h"

#include <algorithm>
#include <cmath>

namespace headroom::est {

namespace {

// See Note [Per-op ledger] (docs/estimator.md).
// The per-op ledger this estimator started from: composed layers, whole-tensor lifetimes. It
// still answers for what the autograd simulation does not run yet: optimizer offload and QLoRA
// under FSDP (and EstimatorOptions::ledgerOnly). One step, phase by phase: each phase a member, sharing the shapes, the parameter
// counts and the running ledger.
class LedgerStep
{
public:
    LedgerStep(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt)
        : model(model)
        , cfg(cfg)
        , opt(opt)
        , x(model, cfg)
        , P(countParams(x))
        , N(cfg.worldSize)
        , zero(cfg.zeroStage)
        , fsdp(zero == 3 && x.full)
        , headTrainable(x.full)
        , fused(cfg.loss == Loss::Fused)
        , cl(x.amp ? 2 : x.c) // logits dtype: lm_head runs in bf16 under autocast
    {
        est.tokens = x.T;
        est.params = paramsPerRank(P, cfg);
        const bool ddp = N > 1 && zero == 0;
        weights = perRank(3, P.summary.weightBytes);
        // ZeRO-Offload keeps the (sharded) optimizer state and its step on the host.
        state = cfg.offloadOptimizer ? 0 : perRank(1, P.summary.optimizerStateBytes);
        // DDP: Reducer::initialize_buckets gives every gradient a bucket copy for the whole run
        // (gradient_as_bucket_view=False), allocated when the model is wrapped.
        const int64_t ddpBuckets = ddp ? P.summary.gradientBytes : 0;
        // ZeRO-1/2: two reduce buckets, allocated once (DeepSpeed's ipg buffers; the probe's bucket pair).
        const int64_t reduceBuckets = zero == 1 || zero == 2 ? 2 * opt.ddpBucketBytes : 0;
        buckets = checkedAdd(ddpBuckets, reduceBuckets);
        // ZeRO-3: a unit's flat parameter all-gathered whole next to its shard (FSDP's padded
        // unsharded flat_param): a decoder layer, and the root, which stays gathered through backward.
        // With LoRA/QLoRA the frozen base is sharded and gathered the same way (FSDP with
        // use_orig_params; estimated, the probe measures ZeRO-3 for full fine-tuning only).
        // FSDP2's MixedPrecisionPolicy gathers in its param_dtype (bf16 over fp32 shards).
        auto gathered = [&](int64_t stored) { return x.mixedPrecisionPolicy ? stored / x.p * 2 : stored; };
        layerFull = zero == 3 ? gathered(P.largestLayerParamBytes) : 0;
        rootFull = zero == 3 ? gathered(P.rootParamBytes) : 0;
    }

    Estimate run()
    {
        afterLoad();
        forward();
        head();
        backward();
        optimizerStep();
        totals();
        est.notes = stepNotes(x, est);
        return est;
    }

private:
    const ModelArch &model;
    const TrainingConfig &cfg;
    const EstimatorOptions &opt;
    Ctx x;
    Params P;
    Estimate est;
    const int N;
    // ZeRO / FSDP bring their machinery at any world size (DeepSpeed and FSDP run on one GPU too);
    // torch DDP wraps only several ranks. ZeRO-3 shards full fine-tuning.
    const int zero;
    const bool fsdp;
    const bool headTrainable;
    const bool fused;
    const int cl;
    int64_t weights = 0, state = 0, buckets = 0, layerFull = 0, rootFull = 0;
    Ledger G; // the step
    Ledger H; // the head, simulated on its own and added
    // Forward to backward: what a layer keeps, the recompute, the head's tensors.
    bool ckpt = false;
    int64_t L = 0, eagerMask = 0;
    LayerCost recompute;
    Breakdown firstKeep, restKeep;
    int64_t fusedGradIn = 0, fusedGradW = 0, fusedCast = 0, logits = 0, logprobs = 0, softcapKeep = 0;

    // Sharding (ZeRO / FSDP): each rank holds 1/N of the state (stage >= 1), of the gradients
    // (stage >= 2) and of the weights (stage 3).
    int64_t perRank(int fromStage, int64_t v) const { return zero >= fromStage ? (v + N - 1) / N : v; }
    // Gradients ZeRO-2 and FSDP see whole before they reduce them: each tensor's for ZeRO-2 (it
    // is reduced as AccumulateGrad finishes it), a unit's for FSDP (reduced when the unit is done).
    int64_t whole(int64_t perTensor) const { return zero >= 2 ? perTensor : perRank(2, perTensor); }

    void afterLoad()
    {
        // ---- After load: the weights (and DDP's buckets).
        est.phases[0].phase = Phase::AfterLoad;
        est.phases[0].atPeak[C::Weights] = weights;
        est.phases[0].atPeak[C::Communication] = buckets;
        est.phases[0].peakAllocatedBytes = checkedAdd(weights, buckets);

        G.alloc(C::Weights, weights);
        G.alloc(C::Communication, buckets);
        G.alloc(C::OptimizerState, state);
        G.alloc(C::Temporaries, 2 * opt.cublasWorkspaceBytes); // forward and backward handles
        G.alloc(C::Temporaries, x.tok(16)); // input_ids and labels (int64), plus the padded shift
        G.resetPeak();
        G.alloc(C::Communication, rootFull); // FSDP root unit: gathered before the embedding

    }

    void forward()
    {
        // ---- Forward.
        ckpt = cfg.gradCheckpointing;
        const bool gradIn0 = x.full; // a frozen embedding gives layer 0 an input without grad
        const LayerCost first = layerForward(x, gradIn0, !ckpt);
        const LayerCost rest = layerForward(x, true, !ckpt);
        recompute = ckpt ? layerForward(x, true, true) : rest;
        L = model.numLayers;
        const int64_t stream = x.tok(x.h) * x.r;
        Breakdown ckptKeep;
        ckptKeep[C::Activations] = roundBlock(stream); // checkpoint saves the layer input
        firstKeep = ckpt ? ckptKeep : first.keep;
        restKeep = ckpt ? ckptKeep : rest.keep;

        G.alloc(C::Temporaries, stream); // embedding output (the embedding saves only indices)
        if (model.learnedPositions) {
            G.alloc(C::Temporaries, stream);
            G.free(C::Temporaries, stream);
        }
        // HF builds one (b, 1, s, s) additive causal mask per forward for eager attention.
        eagerMask =
            cfg.attention == Attention::Eager ? checkedMul(checkedMul(checkedMul(x.b, x.s), x.s), x.c) : 0;
        G.alloc(C::Temporaries, eagerMask);
        // FSDP2: the running layer's unsharded parameters (alloc_storage) and the flat all-gather
        // output they were copied from (_fsdp_collectives.py allocate), which lives until the next
        // layer's all-gather (measured: share2-l1b-bf16-full-adamw-b2s1024-z3's per-rank stream).
        G.alloc(C::Communication, 2 * layerFull);
        G.probe(first.excursion);
        G.add(firstKeep);
        if (L > 1) {
            G.add(restKeep, L - 2);
            G.probe(rest.excursion);
            G.add(restKeep);
        }
        // The last layer reshards; its all-gather output stays through the head and into backward
        // (116 MiB for a Llama-3.2-1B layer at both the forward and the backward peak).
        G.free(C::Communication, layerFull);
    }

    // Final norm, lm_head and the loss, on a ledger of their own (H), added to the step's.
    void head()
    {
        // Final norm and lm_head.
        bool unused = false;
        Input fn = norm(H, x, x.T, x.h, x.r, true, true, unused);
        // Fused linear cross-entropy (Ops::fusedLinearCrossEntropy has the code path): the gradients
        // of the final hidden state and of the lm_head weight are made in forward, chunk by chunk,
        // and kept; the logits never exist whole.
        if (fused) {
            releaseInput(H, fn, true); // Liger saves its gradients, not its input
            const int64_t weightCast = (x.amp && !x.qlora) ? checkedMul(checkedMul(x.V, x.h), 2) : 0;
            fusedCast = headTrainable ? weightCast : 0; // autocast caches a trainable leaf's cast
            H.alloc(C::Activations, fusedCast);
            fusedGradIn = x.tok(x.h) * x.r;            // zeros_like(_input)
            fusedGradW = headTrainable ? (model.tiedEmbeddings ? P.embedGradBytes : P.lmHeadGradBytes) : 0;
            H.alloc(C::Logits, fusedGradIn);
            H.alloc(C::Logits, fusedGradW);
            const int64_t small = checkedAdd(checkedMul(x.T, 4 + 1 + 8), checkedMul(x.b, 8)); // loss_1d, mask, labels
            H.alloc(C::Temporaries, small);
            const int64_t chunk = fusedLossChunkRows(x.T, x.h, x.V);
            // A trainable lm_head in the logits' dtype: grad_weight += mm(grad_logits.t(), x).float(),
            // a [vocab, hidden] product and its fp32 copy per chunk (Ops::fusedLinearCrossEntropy).
            const int weightElem = x.amp ? 4 : x.p;
            const int64_t weightTmp = !headTrainable || (weightElem == 4 && cl != 4)
                                          ? 0
                                          : checkedMul(checkedMul(x.V, x.h), cl + (cl != 4 ? 4 : 0));
            const int64_t transient = checkedAdd(checkedAdd(checkedMul(chunk, x.V * cl), checkedMul(chunk, x.h * cl)),
                                                 checkedAdd(checkedAdd(x.amp ? checkedMul(chunk, x.h * 2) : 0,
                                                                       headTrainable ? 0 : weightCast),
                                                            weightTmp));
            H.alloc(C::Logits, transient);
            H.free(C::Logits, transient);
            H.free(C::Temporaries, small);
        }
        if (headTrainable && !fused) {
            if (x.amp)
                H.alloc(C::Activations, x.tok(x.h) * 2); // autocast copy saved by lm_head
            else
                fn.saved = true;
        }
        if (!fused) {
        releaseInput(H, fn, true);
        // Under autocast the lm_head weight is cast to bf16 too and saved by its matmul.
        const int64_t headCopy = (x.amp && !x.qlora) ? checkedMul(checkedMul(x.V, x.h), 2) : 0;
        H.alloc(C::Activations, headCopy);
        logits = checkedMul(x.tok(x.V), cl);
        H.alloc(C::Logits, logits);
        if (model.finalLogitSoftcap > 0) {
            // Gemma 2: logits / cap (new), tanh (saves its output), * cap (new): the tanh output stays.
            H.alloc(C::Logits, logits);
            H.free(C::Logits, logits);
            H.alloc(C::Logits, logits);
            H.free(C::Logits, logits);
            H.alloc(C::Logits, logits);
            softcapKeep = logits;
        }
        // ForCausalLMLoss: logits.float(), then cross_entropy = log_softmax (saves its output) + nll_loss.
        const int64_t upcast = cl < 4 ? x.tok(x.V) * 4 : 0;
        H.alloc(C::Logits, upcast);
        logprobs = x.tok(x.V) * 4;
        H.alloc(C::Logits, logprobs);
        H.free(C::Logits, upcast);
        H.free(C::Logits, logits); // the output object (and its logits) is dropped before backward
        }
        G.probe(H.atPeak());
        G.add(H.current());
        G.free(C::Activations, fusedCast); // the autocast cache goes as the forward's autocast ends
        G.free(C::Temporaries, eagerMask);
        G.free(C::Temporaries, x.tok(x.h) * x.r); // the final hidden state
        est.phases[1].phase = Phase::Forward;
        est.phases[1].peakAllocatedBytes = G.peak();
        est.phases[1].atPeak = G.atPeak();

    }

    void backward()
    {
        // ---- Backward.
        G.resetPeak();
        // Gradients ZeRO-2 and FSDP see whole before they reduce them: each tensor's for ZeRO-2 (it
        // is reduced as AccumulateGrad finishes it), a unit's for FSDP (reduced when the unit is done).
        if (fused) {
            // The saved gradients are handed on: grad_input to the final norm, grad_weight to .grad.
            G.free(C::Logits, fusedGradIn);
            G.free(C::Logits, fusedGradW);
        } else {
        G.alloc(C::Logits, logprobs); // nll_loss_backward: grad of the log-probabilities
        G.alloc(C::Logits, logprobs); // _log_softmax_backward_data
        G.free(C::Logits, logprobs);  // the saved log-probabilities are released
        G.free(C::Logits, logprobs);
        if (cl < 4) {
            G.alloc(C::Logits, logits); // ToCopyBackward: the gradient back in bf16
            G.free(C::Logits, logprobs);
        }
        if (softcapKeep) {
            G.alloc(C::Logits, logits);
            G.free(C::Logits, logits);
            G.free(C::Logits, softcapKeep);
        }
        }
        G.alloc(C::Temporaries, x.tok(x.h) * x.c); // lm_head backward: grad of the final hidden state
        // The lm_head's weight gradient (tied: the embedding's, summed into later), then the final norm's.
        // ZeRO-2 reduces each as it is accumulated and keeps its part; the FSDP root keeps them whole
        // until the embedding's arrives at the end of backward.
        const int64_t headGrads = headTrainable ? checkedAdd(model.tiedEmbeddings ? P.embedGradBytes : P.lmHeadGradBytes,
                                                             P.finalNormGradBytes)
                                                : 0;
        G.alloc(C::Gradients, whole(headGrads));
        if (zero == 2) {
            G.free(C::Gradients, headGrads);
            G.alloc(C::Gradients, perRank(2, headGrads));
        }
        if (!fused)
            G.free(C::Logits, cl < 4 ? logits : logprobs); // the gradient of the logits is consumed
        G.free(C::Activations, H.current()[C::Activations]); // final norm's saved tensors go

        // Decoder layers, top to bottom. FSDP: the running layer's unit and the prefetched one below it
        // (BACKWARD_PRE) are gathered (one of the two buffers since the forward's last layer).
        G.alloc(C::Communication, layerFull);
        const int64_t layerGrads = perRank(2, P.layerGradBytes);
        const int64_t I = model.isMoe() ? checkedMul(model.expertIntermediateSize, model.expertsPerToken)
                                        : model.intermediateSize;
        // A layer's backward excursion depends on shapes alone, so it is the same for every layer.
        const Breakdown layerBackward = [&] {
            Breakdown e;
            // MLP backward: grad_a and grad_u of the product live together, with the gradient of the
            // layer's output and input in flight; LoRA adds the gradient of the fp32 input cast.
            int64_t mlpT = checkedMul(x.tok(I), 2 * x.c) + x.tok(x.h) * x.c;
            if (!x.full)
                mlpT = checkedAdd(mlpT, x.tok(I) * 4);
            // Attention backward: dq, dk, dv plus flash's fp32 dq accumulator; eager holds the gradient of
            // the probabilities in bf16 and fp32 and the gradient of the scores.
            const int64_t sc = checkedMul(checkedMul(checkedMul(x.b, x.nh), x.s), x.s);
            const int64_t attnT = cfg.attention == Attention::Eager
                                      ? checkedMul(sc, 2 * x.c + 4)
                                      : checkedAdd(x.tok(x.qOut + 2 * x.kvOut) * x.c, x.tok(x.qOut) * 4);
            e[C::Temporaries] = std::max(mlpT, attnT);
            e[C::Gradients] = layerGrads;
            if (zero == 2) // the largest gradient whole, before its reduction
                e[C::Gradients] = checkedAdd(layerGrads, P.largestLayerGradTensorBytes);
            // FSDP: the layer's gradients come whole, then SplitWithSizesBackward concatenates them
            // into the flat gradient (both alive, the layer's activations gone), which is
            // reduce-scattered into the shard.
            Breakdown cat;
            if (fsdp) { // this layer's shard comes only after the reduce-scatter (in `net` below)
                e[C::Gradients] = P.layerGradBytes;
                cat[C::Gradients] = 2 * P.layerGradBytes;
                cat[C::Temporaries] = x.tok(x.h) * x.c; // the gradient of the layer's input
                cat[C::Activations] = -restKeep[C::Activations]; // the layer's saved tensors are gone by then
            }
            if (ckpt) {
                // Recompute: the layer's forward runs again with its activations kept.
                Breakdown withKeep = e;
                withKeep[C::Activations] += recompute.keep[C::Activations];
                withKeep[C::Temporaries] += recompute.keep[C::Temporaries];
                const Breakdown &re = recompute.excursion;
                e = withKeep.total() >= re.total() ? withKeep : re;
            }
            return cat.total() > e.total() ? cat : e;
        }();
        Breakdown net;
        net[C::Activations] = -restKeep[C::Activations];
        net[C::Gradients] = layerGrads;
        Breakdown net0 = net;
        net0[C::Activations] = -firstKeep[C::Activations];
        if (L > 1) {
            G.probe(layerBackward);
            G.add(net, L - 2);
            G.probe(layerBackward);
            G.add(net);
        }
        G.probe(layerBackward);
        G.add(net0);
        // Embedding backward (embedding_dense_backward). Tied: AccumulateGrad sums into the lm_head's
        // gradient out of place, so the new gradient and the sum coexist with the old one.
        G.free(C::Communication, 2 * layerFull);
        if (x.full) {
            const int64_t eg = whole(P.embedGradBytes);
            if (model.tiedEmbeddings) {
                G.alloc(C::Temporaries, eg);
                G.alloc(C::Temporaries, eg);
                G.free(C::Temporaries, 2 * eg);
            } else {
                G.alloc(C::Gradients, eg);
            }
            G.alloc(C::Gradients, whole(P.positionGradBytes));
            if (zero == 2) { // reduced as they come; this rank keeps its part
                const int64_t last = checkedAdd(model.tiedEmbeddings ? 0 : P.embedGradBytes, P.positionGradBytes);
                G.free(C::Gradients, last);
                G.alloc(C::Gradients, perRank(2, last));
            }
            if (fsdp) { // the root's flat gradient: concatenated, reduce-scattered, then the root reshards
                const int64_t rootGrads =
                    checkedAdd(checkedAdd(headGrads, model.tiedEmbeddings ? 0 : P.embedGradBytes), P.positionGradBytes);
                G.alloc(C::Gradients, rootGrads);
                G.free(C::Gradients, 2 * rootGrads - perRank(2, rootGrads));
            }
        }
        G.free(C::Communication, rootFull);
        G.free(C::Temporaries, x.tok(x.h) * x.c);
        est.phases[2].phase = Phase::Backward;
        est.phases[2].peakAllocatedBytes = G.peak();
        est.phases[2].atPeak = G.atPeak();

    }

    void optimizerStep()
    {
        // ---- Optimizer step: state, gradients and the step's temporaries.
        G.resetPeak();
        const int64_t stepTemp = cfg.offloadOptimizer ? 0 : perRank(1, P.stepTemporaryBytes);
        G.alloc(C::Temporaries, stepTemp);
        G.free(C::Temporaries, stepTemp);
        est.phases[3].phase = Phase::Optimizer;
        est.phases[3].peakAllocatedBytes = G.peak();
        est.phases[3].atPeak = G.atPeak();

    }

    // Overall peak, reserved and device total.
    void totals()
    {
        takePeakPhase(est);
        const double slackFraction = opt.allocatorSlackFraction > 0 ? opt.allocatorSlackFraction : defaultSlackFraction();
        const int64_t slack = static_cast<int64_t>(std::llround(static_cast<double>(est.peakAllocatedBytes) * slackFraction));
        est.peak[C::AllocatorSlack] = slack;
        est.peakReservedBytes = checkedAdd(est.peakAllocatedBytes, slack);
        addOutsideAllocator(est, cfg, opt);
    }
};

} // namespace

Estimate estimateLedger(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    return LedgerStep(model, cfg, opt).run();
}

} // namespace headroom::est
