// A Hugging Face training run, op by op, on the autograd simulator (autograd.h, ops.h): what
// AutoModelForCausalLM.from_config allocates, then HF Trainer's loop. The forward follows the
// modeling code of Transformers 5.17 (modeling_llama.py and the families that share its layout,
// keyed on config fields, not family names); backward follows from the graph.

#include "headroom/simulation.h"

#include "autograd.h"
#include "deltanet.h"
#include "dpo.h"
#include "grpo.h"
#include "kto.h"
#include "orpo.h"
#include "reward.h"
#include "vision.h"
#include "ops.h"
#include "optimizer.h"
#include "parallel.h"

#include "headroom/error.h"
#include "headroom/vision.h"

#include <algorithm>
#include <optional>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>

namespace headroom {

namespace {

using sim::Ops;
using sim::Sim;
using sim::T;

constexpr int kLoraElem = 4; // PEFT keeps adapters in fp32 (autocast_adapter_dtype=True)

struct LoraPair
{
    T a, b; // lora_A [r, in], lora_B [out, r]
    bool on = false;
};

struct LayerParams
{
    T q, k, v, o, qb, kb, vb, ob;
    T qn, kn;                   // Qwen3 q/k RMSNorm over head_dim
    T gate, up, down, upB, downB;
    T n1, n1b, n2, n2b, n3, n4; // norms (weight, bias); Gemma 2 has four
    // Mixture of experts: the router, the experts' stacked weights (transformers 5: one
    // [experts, 2 x intermediate, hidden] gate_up_proj and one [experts, hidden, intermediate]
    // down_proj Parameter, not Linear modules, so PEFT's LoRA leaves them alone), and Qwen2-MoE's
    // shared expert (gate/up/down above) with its sigmoid gate.
    T router, gateUp, expDown, sharedGate, routerBias;
    T sinks, routerB, gateUpB, expDownB; // GPT-OSS: attention sinks, the router's and experts' biases
    // Multi-head latent attention (DeepSeek): q_a_proj / q_a_layernorm / q_b_proj (with
    // q_lora_rank; otherwise `q` is q_proj), kv_a_proj_with_mqa (+ bias), kv_a_layernorm, kv_b_proj.
    T qa, qaN, qb2, kva, kvaB, kvaN, kvb;
    std::array<LoraPair, kLinearModuleCount> lora;
    LoraPair gateUpLora, downLora; // PEFT ParamWrappers on the stacked experts (model.h expertsLora)
    // Qwen3.5's gated DeltaNet (linear-attention layers): dt_bias, A_log, conv1d, norm, out_proj,
    // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
    T laDt, laA, laConv, laNorm, laOut, laQkv, laZ, laB, laAp;
    std::array<LoraPair, kLinearAttentionLinears> laLora; // sim::DeltaNetProjection order
    LoraPair sharedGateLora; // all-linear wraps shared_expert_gate, an nn.Linear(hidden, 1)
    // Gemma 4's per-layer input: per_layer_input_gate, per_layer_projection, post_per_layer_input_norm.
    T pliGate, pliProj, pliNorm;
    std::array<LoraPair, 2> pliLora;
    std::array<LoraPair, kMlaLinears> mlaLora; // q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj
    std::array<T *, 48> registered{}; // the parameter slots in model.parameters() order (Run::layerParameters)
};

class Run
{
public:
    Run(const ModelArch &m, const TrainingConfig &c, const EstimatorOptions &o, Timeline &tl)
        : m(m)
        , c(c)
        , opt(o)
        , S(tl)
        , O(S)
        , ft(familyTraitsOrLlama(m.modelType))
        , hc(ft.textConfigNested && m.hfConfig.is_object() && m.hfConfig.contains("text_config")
                 ? m.hfConfig.at("text_config")
                 : m.hfConfig)
        , par(sim::makeParallelStrategy({S, c, o}))
    {
        // Room up front (a Llama layer makes about 450 events a micro-batch with its backward;
        // three steps, the repeated one copied in): growing the vectors took half the
        // simulation's time (Llama-3.1-8B LoRA: 2.76 -> 1.42 ms). Only what is written is touched.
        // The gated DeltaNet's scan adds about 100 events a 64-token chunk per linear-attention layer.
        const int64_t scanEvents = m.linearAttentionLayerCount() * ((c.seqLen + 63) / 64) * 100;
        // GRPO's generation: every layer's two cache concatenations a token, the prefill and the
        // reference's chunks (Note [GRPO step])
        const int64_t rolloutEvents = c.mode == TrainingMode::GRPO
                                          ? (m.numLayers * 8 + 32) * c.seqLen + m.numLayers * 640 * (c.gradAccum + 1)
                                          : 0;
        S.reserve(static_cast<size_t>(std::min<int64_t>(
            int64_t(1) << 22, (m.numLayers * 640 + 4 * 640 + scanEvents) *
                                      std::clamp<int64_t>(c.gradAccum, 1, kSimulatedMiddleMicroBatches + 2) * 4 +
                                  rolloutEvents * 4 + 4096)));
        S.setBlasWorkspaceBytes(o.cublasWorkspaceBytes);
        S.setBlasLtWorkspaceBytes(o.cublasLtWorkspaceBytes);
        dpo = c.mode == TrainingMode::DPO;
        reward = m.scoreLabels > 0;
        kto = c.mode == TrainingMode::KTO;
        orpo = c.mode == TrainingMode::ORPO;
        grpo = c.mode == TrainingMode::GRPO;
        b = dpo || reward || orpo ? checkedMul(2, c.microBatch) : c.microBatch; // b pairs, 2b sequences
        s = c.seqLen;
        tok = checkedMul(b, s);
        h = m.hiddenSize;
        heads = m.numHeads;
        kvHeads = m.numKvHeads;
        hd = m.headDim;
        qOut = heads * hd;
        kvOut = kvHeads * hd;
        V = m.vocabSize;
        amp = isAmp(c.precision);
        pe = parameterBytes(c.precision);
        ce = computeBytes(c.precision);
        re = amp ? 4 : ce;
        full = c.finetune == FineTune::Full;
        if (!full) {
            loraMask = loraAdaptedModules(m, c.lora.targets);
            laMask = linearAttentionLora(m, c.lora.targets);
            sharedGateMask = sharedExpertGateLora(m, c.lora.targets);
            expertsWrapped = expertsLora(m, c.lora.targets);
            pliMask = perLayerInputLora(m, c.lora.targets);
            mlaMask = mlaLora(m, c.lora.targets);
        }
        qlora = c.finetune == FineTune::QLoRA;
        visionSim = ft.visionTowerSimulated && m.vision.present();
        if (visionSim)
            vt = visionTokens(m, c);
        inputRequiresGrad = c.finetune == FineTune::LoRA && c.gradCheckpointing;
        if (grpo) {
            gs.completions = checkedMul(c.microBatch, c.gradAccum);
            gs.micro = c.microBatch;
            gs.prompt = c.dpo.prompt(c.seqLen);
            gs.completion = c.seqLen - gs.prompt;
            gs.vocab = V;
            gs.temperature = c.grpo.temperature;
        }
        if (par->replacesAutocast(amp)) { // FSDP2's mixed-precision policy: a pure bf16 step
            amp = false;
            ce = re = 2;
        }
        if (qlora) {
            // The decoder's nn.Linear layers become bitsandbytes Linear4bit with the model's dtype
            // as compute_dtype; peft.prepare_model_for_kbit_training then casts every parameter
            // that is not a Params4bit to fp32 (utils/other.py: embeddings, norms, lm_head). With
            // an fp32 embedding and fp32 norm weights the residual stream and every activation are
            // fp32; Linear4bit casts its input to compute_dtype and its output back
            // (bitsandbytes/nn/modules.py Linear4bit.forward). Measured on the H200 with
            // bitsandbytes 0.50 (quantizeForQlora has the load; the corpus's *-qlora16-* runs).
            // compute_dtype is the dtype the model was built in: 16-bit, with autocast too (see
            // buildElem()), so a Linear4bit casts its input to it under autocast as well.
            qe = 2;
            if (!amp)
                ce = re = 4;
        }
    }

    void run(int measuredSteps)
    {
        load();
        for (int step = 0; step <= measuredSteps; ++step) {
            if (grpo)
                rollout(step);
            for (int64_t micro = 0; micro < c.gradAccum; micro = nextSimulatedMicroBatch(micro)) {
                S.setPhase(step, Phase::Forward, static_cast<int>(micro));
                S.setSavedToHost(c.activationOffload); // save_on_cpu wraps model(...) only
                T loss = forward(batches[static_cast<size_t>(micro)]);
                S.setSavedToHost(false);
                if (c.gradAccum > 1) {
                    T scaled = O.scale(loss); // loss / gradient_accumulation_steps
                    S.drop(loss);
                    loss = scaled;
                }
                S.setPhase(step, Phase::Backward, static_cast<int>(micro));
                S.setOp("backward");
                S.setLayer(-1);
                if (step == 0 && micro == c.gradAccum - 1)
                    S.clearGradReadyOrder(); // the synchronized backward (no_sync before it)
                par->beforeBackward(micro == c.gradAccum - 1);
                S.backward(loss);
                par->afterBackward();
                S.drop(loss);
            }
            S.setPhase(step, Phase::Optimizer, 0);
            optimizerStep(step);
            S.setOp("zero_grad");
            S.zeroGrad();
            par->afterZeroGrad(step);
        }
    }

private:
    // The first micro-batch of a step, the next two and the last are simulated; the ones between
    // repeat the one before. See Note [Simulated micro-batches] (docs/estimator.md).
    static constexpr int64_t kSimulatedMiddleMicroBatches = 2;
    int64_t nextSimulatedMicroBatch(int64_t micro)
    {
        const int64_t last = c.gradAccum - 1;
        if (micro < kSimulatedMiddleMicroBatches || micro >= last)
            return micro + 1;
        // Each skipped input becomes what the simulated ones became (saved by the embedding for
        // its backward under full fine-tuning, a plain input under LoRA).
        const Category used = S.categoryOf(batches[static_cast<size_t>(micro)].sto);
        for (int64_t skipped = micro + 1; skipped < last; ++skipped)
            S.recategorize(batches[static_cast<size_t>(skipped)].sto, used);
        return last;
    }

    const ModelArch &m;
    const TrainingConfig &c;
    const EstimatorOptions &opt;
    Sim S;
    Ops O;
    const FamilyTraits &ft;
    // The language model's config.json fields: a composite's text_config (FamilyTraits::textConfigNested).
    const nlohmann::json &hc;
    std::unique_ptr<sim::ParallelStrategy> par; // single GPU, DDP, ZeRO-1 or FSDP2 (sim/parallel/)
    int64_t b = 1, s = 1, tok = 1, h = 1, heads = 1, kvHeads = 1, hd = 1, qOut = 1, kvOut = 1, V = 1;
    bool amp = false, full = true, qlora = false, inputRequiresGrad = false;
    // Issue 29: a DPO step, and while its reference runs, the adapters off (PEFT's
    // disable_adapter) and checkpointing off (TRL's disable_gradient_checkpointing)
    bool dpo = false, adaptersOff = false, checkpointingOff = false;
    bool referencePass = false; // the reference's forward: its weights frozen (GRPO's lm_head)
    bool reward = false; // a reward model's step (See Note [Reward step])
    bool kto = false;    // a KTO step (See Note [KTO step])
    bool orpo = false;   // an ORPO step (See Note [ORPO step])
    bool grpo = false;   // a GRPO step (See Note [GRPO step])
    sim::GrpoShape gs;
    // Issue 30: a vision-language step whose frozen tower is simulated (Note [Vision step]): the
    // tokens and tower rows of the sample's pixels, the tower's and projector's frozen weights, and
    // Qwen2_5_VLModel.rope_deltas (kept on the module from one forward to the next).
    bool visionSim = false;
    VisionTokens vt;
    std::vector<T> towerWeights;
    // Note [Vision LoRA]: LoRA's adapters on the tower's Linears, made before the decoder's (the
    // composite model's vision side comes first in named_modules), and handed to the tower's graph
    std::vector<LoraPair> towerPairs;
    sim::TowerLora towerLora;
    // How the tower runs (Note [Vision step]): trained parts in full fine-tuning; gradient
    // checkpointing hooks each sub-model's input embeddings (SigLIP's and CLIP's patch embedding,
    // Qwen2.5-VL's patch_embed: the timelines of Gemma 3's LoRA, LLaVA's and Qwen2.5-VL's full
    // steps), which puts the tower in the graph, each layer checkpointed.
    sim::TowerMode towerMode() const
    {
        sim::TowerMode mode;
        mode.towerTrained = c.vision.trainTower && full;
        mode.projectorTrained = c.vision.trainProjector && full;
        mode.hooked = c.gradCheckpointing && m.vision.tower.checkpointHooked;
        mode.checkpointed = c.gradCheckpointing;
        return mode;
    }

    // Qwen3-VL's deepstack (sim::deepstackAdd): the visual positions' mask and the features added
    // after the first decoder layers, a list per tower call until deepstackInputs joins them
    std::vector<T> deepstackMasks;
    std::vector<std::vector<T>> deepstackFeatures;
    // Gemma 3 with images: the full and sliding layers' block-causal masks (sim::blockCausalMasks)
    std::array<T, 2> blockMasks;
    // What the CausalLM's output object holds besides the logits (image_hidden_states), until the
    // loss is taken from it
    std::vector<T> outputLocals;
    T ropeDeltas;
    // GRPO: while generate runs, every layer's DynamicCache keys and values; `decoding` once the
    // prefill has filled them
    struct KvCache
    {
        bool on = false;
        std::vector<T> keys, values;
    } kv;
    T prompts, promptMask;    // GRPO: the generation batch's prompts, made once
    std::vector<T> rolloutOut; // GRPO: the step's completions, masks, advantages, reference log-probs
    std::vector<T> referenceWeights; // a frozen reference copy
    int pe = 2, ce = 2, re = 2;
    int qe = 2; // QLoRA: Linear4bit's compute dtype
    std::array<bool, kLinearModuleCount> loraMask{};
    std::array<bool, kLinearAttentionLinears> laMask{}; // Qwen3.5's DeltaNet Linears LoRA wraps
    bool sharedGateMask = false;                        // ... and the shared expert's gate
    std::array<bool, kPerLayerInputLinears> pliMask{};  // ... and Gemma 4's per-layer-input Linears
    std::array<bool, kMlaLinears> mlaMask{};            // ... and multi-head latent attention's
    ExpertsLora expertsWrapped;
    T embed, positions, finalNorm, finalNormB, lmHead, lmHeadB;
    T scoreFrozen; // under PEFT, a sequence classifier's original score (lmHead is the trained copy)
    // Gemma 4's per-layer inputs (Note [Gemma 4]): embed_tokens_per_layer, per_layer_model_projection
    // (with its adapters) and per_layer_projection_norm; in forward, the inputs every layer slices.
    T pliEmbed, pliModelProj, pliProjNorm, pliInputs;
    T layerPli; // the layer's slice of pliInputs (a view), for its forward and recomputation
    // Gemma 4's shared_kv_states: the keys and values of the last layer of each kind (sliding,
    // global), kept in a dict until the model's forward returns, or, checkpointed, until the
    // frame of the first checkpointed layer goes (Note [Gemma 4]). A recomputation replaces them.
    std::array<std::vector<T>, 2> sharedKv;
    int firstCheckpointRegion = -1; // this forward's
    void dropSharedKv()
    {
        for (auto &kind : sharedKv) {
            for (T &t : kind)
                S.drop(t);
            kind.clear();
        }
    }
    LoraPair pliModelLora;
    std::vector<T> rotLocals; // an attention forward's rotary locals, dropped when it returns
    T outGate;                // Qwen3.5's attention output gate, until the output is gated
    std::vector<LayerParams> layers;
    std::vector<T> batches;
    std::vector<T> batchRest; // each micro-batch's tensors beside its ids (batchTensors)
    std::vector<T *> trainable; // in model.parameters() order
    std::vector<T *> stepped;   // what this rank's optimizer steps: all, or its ZeRO-1 share
    std::map<int, T> ampCache; // autocast's cast of each trainable weight, for one forward
    // See Note [Python locals] (docs/estimator.md).
    std::vector<T> embedLocals; // tensors a model's forward keeps in locals until it returns
    std::vector<T> buffers;     // the model's buffers (rotary inv_freq, router biases)

    // ------------------------------------------------------------------ building the model
    T param(int64_t rows, int64_t cols, bool trainableHere, const char *name, int elem = 0)
    {
        S.setOp(name);
        const int e = elem ? elem : buildElem();
        T t = S.parameter(checkedMul(checkedMul(rows, cols), e), e, trainableHere);
        t.rows = rows;
        t.cols = cols;
        return t;
    }

    // A norm weight's element size: the model's, or fp32 where the modeling code keeps them so.
    int normElem() const { return ft.normsFp32 ? 4 : 0; }
    // The dtype from_config builds the model in: the parameters', but QLoRA builds in its 16-bit
    // compute dtype under autocast too (prepare_model_for_kbit_training makes the rest fp32 after;
    // the H200 streams of the corpus's amp QLoRA runs build a bf16 embedding).
    int buildElem() const { return qlora ? 2 : pe; }

    // A decoder nn.Linear's weight. Under QLoRA it is made in the model's dtype like every
    // parameter (from_config) and marked: quantizeForQlora() turns it into a Params4bit.
    T linearWeight(int64_t rows, int64_t cols, bool trainableHere, const char *name)
    {
        T w = param(rows, cols, trainableHere, name);
        w.nf4 = qlora && !ft.conv1dLinears; // GPT-2's Conv1D is not an nn.Linear: it stays
        return w;
    }

    // A Linear4bit's bias: prepare_model_for_kbit_training makes it fp32, and the first forward
    // casts it back to compute_dtype in place (bias.data = bias.data.to(x.dtype)).
    T linearBias(int64_t rows, bool trainableHere, const char *name)
    {
        T b = param(rows, 1, trainableHere, name);
        b.nf4 = qlora && !ft.conv1dLinears; // marks "ends in compute_dtype" (quantizeForQlora)
        return b;
    }

    // A decoder layer's parameter slots (unset ones included), in the order model.parameters()
    // lists them: the order buildLayer made them in, which is the modules' registration order
    // (the input_layernorm after the MLP, but first in GPT-2 and GPT-NeoX). The slots keep their
    // places when QLoRA replaces what is in them.
    static std::array<T *, 48> layerSlots(LayerParams &L)
    {
        return {&L.n1,     &L.n1b,    &L.qa,      &L.qaN,    &L.qb2,     &L.q,       &L.qb,         &L.kva,  &L.kvaB,
                &L.kvaN,   &L.kvb,    &L.k,       &L.kb,     &L.v,       &L.vb,      &L.o,          &L.ob,   &L.sinks,
                &L.qn,     &L.kn,     &L.laDt,    &L.laA,    &L.laConv,  &L.laNorm,  &L.laOut,      &L.laQkv, &L.laZ,
                &L.laB,    &L.laAp,   &L.router,  &L.routerB, &L.gateUp, &L.gateUpB, &L.expDown,    &L.expDownB,
                &L.gate,   &L.up,     &L.upB,     &L.down,   &L.downB,   &L.sharedGate, &L.n2,      &L.n2b,  &L.n3,
                &L.n4,     &L.pliGate, &L.pliProj, &L.pliNorm};
    }
    static const std::array<T *, 48> &layerParameters(LayerParams &L) { return L.registered; }
    // After buildLayer: the slots ordered by when their parameters were made (storage ids grow).
    static void recordRegistration(LayerParams &L)
    {
        L.registered = layerSlots(L);
        std::stable_sort(L.registered.begin(), L.registered.end(), [](const T *a, const T *b) {
            if (a->valid() != b->valid())
                return a->valid();
            return a->valid() && a->sto < b->sto;
        });
    }

    // Every parameter of the base model, in (about) registration order.
    std::vector<T *> baseParameters()
    {
        std::vector<T *> out = {&embed, &positions};
        for (auto &L : layers)
            for (T *t : layerParameters(L))
                out.push_back(t);
        out.push_back(&finalNorm);
        out.push_back(&finalNormB);
        for (T *t : {&pliEmbed, &pliModelProj, &pliProjNorm})
            out.push_back(t);
        if (!m.tiedEmbeddings)
            out.push_back(&lmHead);
        out.push_back(&lmHeadB);
        std::vector<T *> valid;
        for (T *t : out)
            if (t->valid())
                valid.push_back(t);
        return valid;
    }

    // See Note [QLoRA load] (docs/estimator.md).
    // QLoRA as the transformers engine loads it (headroom_engine.quantize_4bit, then
    // peft.prepare_model_for_kbit_training): each decoder Linear becomes a Linear4bit, whose
    // Params4bit._quantize copies the weight to the device and runs functional.quantize_4bit: an
    // fp32 absmax per 64 values and the packed weight (two values per byte), then, double
    // quantized, the offset, the 256-entry fp32 code, the absmax's own fp32 absmax per 256 blocks
    // and the uint8 absmax, the fp32 absmax freed; the old weight goes with its module. Then gc
    // and torch.cuda.empty_cache(); then every parameter that is not 4-bit is cast to fp32 (the
    // old one freed), and empty_cache() again.
    void quantizeForQlora()
    {
        // Each Linear's weight becomes a Params4bit (bitsandbytes 0.50, nn/modules.py _quantize ->
        // functional.quantize_4bit, backends/cuda/ops.py), allocation for allocation as the
        // engine recorded it (q7b-bf16-qlora16-b1s2048-ckpt's stream): a contiguous copy of the
        // weight, the fp32 absmax per 64-block and the packed 4-bit output; get_4bit_type's code
        // (64 B, kept in the QuantState) and its temporaries; with double quantization the offset
        // (absmax.mean(), kept) and its reduction's temporaries, absmax - offset (fp32, freed),
        // state2's absmax, the uint8 absmax and the dynamic map (kept). The bf16 originals stay
        // allocated until every Linear is done, then go in reverse order of creation (the old
        // modules' parameters released together), before the load's empty_cache().
        const std::vector<T *> params = baseParameters();
        std::vector<T> originals;
        for (T *t : params) {
            if (!t->nf4 || t->cols <= 1)
                continue;
            S.setOp("quantize_4bit");
            const int64_t n = checkedMul(t->rows, t->cols), blocks = (n + 63) / 64;
            T copy = S.make(t->bytes, t->elem, Category::Temporaries);
            const int absmax = S.allocate(blocks * 4, Category::Temporaries);
            T w = S.parameter((n + 1) / 2, 1, false);
            w.rows = t->rows;
            w.cols = t->cols;
            w.nf4 = true;
            {
                const int a = S.allocate(64, Category::Temporaries);
                S.make(64, 4, Category::Weights); // get_4bit_type's code, kept
                const int b = S.allocate(4, Category::Temporaries);
                S.unref(a);
                S.unref(b);
            }
            if (c.lora.doubleQuant) {
                S.make(4, 4, Category::Weights); // offset = absmax.mean()
                const int a = S.allocate(520, Category::Temporaries), b = S.allocate(4, Category::Temporaries);
                S.unref(b);
                S.unref(a);
                const int centred = S.allocate(blocks * 4, Category::Temporaries); // absmax - offset
                S.make((blocks + 255) / 256 * 4, 4, Category::Weights); // state2.absmax
                S.make(blocks, 1, Category::Weights);                   // the uint8 absmax
                S.make(256 * 4, 4, Category::Weights);                  // the dynamic map (code)
                S.unref(centred);
                S.unref(absmax);
            } else {
                S.recategorize(absmax, Category::Weights); // kept as the quant state
            }
            S.drop(copy);
            originals.push_back(*t);
            *t = w;
        }
        for (auto it = originals.rbegin(); it != originals.rend(); ++it)
            S.drop(*it);
        S.emptyCache();
        S.setOp("prepare_model_for_kbit_training");
        for (T *t : params) {
            if (t->nf4 && t->cols > 1)
                continue;
            // Linear4bit biases end in compute_dtype (cast back in place at the first forward).
            const int elem = t->nf4 ? qe : 4;
            if (t->elem == elem)
                continue;
            T f = S.parameter(checkedMul(t->numel(), elem), elem, false);
            f.rows = t->rows;
            f.cols = t->cols;
            T old = *t;
            *t = f;
            S.drop(old);
        }
        if (m.tiedEmbeddings)
            lmHead = embed;
        S.emptyCache();
    }

    // The attention's sizes on layer l: the model's, or Gemma 4's global layers' own.
    void useGeometry(int64_t l)
    {
        const ModelArch::AttentionGeometry g = m.attentionAt(l);
        hd = g.headDim;
        kvHeads = g.kvHeads;
        qOut = checkedMul(heads, hd);
        kvOut = checkedMul(kvHeads, hd);
    }

    // The layer's token mixer, in registration order: the gated DeltaNet (Qwen3.5's linear
    // layers), or the attention's projections (MLA's, a fused q/k/v, Gemma 4's, or q, k, v, o),
    // with their norms and GPT-OSS's sinks.
    void buildMixer(LayerParams &L, int64_t l)
    {
        const bool t = full;
        const int64_t H = heads, qk = m.qkNopeDim + m.qkRopeDim;
        auto outProj = [&] {
            L.o = linearWeight(h, m.isMla() ? checkedMul(H, m.vHeadDim) : qOut, t, "o_proj");
            if (m.oBias)
                L.ob = linearBias(h, t, "o_proj");
        };
        const bool linearAttn = m.isLinearAttentionLayer(l);
        if (linearAttn) {
            // Qwen3_5GatedDeltaNet.__init__ (Note [Gated DeltaNet]): its own parameters, then its
            // modules', in model.parameters() order.
            const auto &la = m.linearAttn;
            L.laDt = param(la.valueHeads, 1, t, "linear_attn.dt_bias");
            L.laA = param(la.valueHeads, 1, t, "linear_attn.A_log");
            L.laConv = param(la.convWidth(), la.convKernel, t, "linear_attn.conv1d");
            L.laNorm = param(la.valueDim, 1, t, "linear_attn.norm");
            L.laOut = linearWeight(h, la.valueWidth(), t, "linear_attn.out_proj");
            L.laQkv = linearWeight(la.convWidth(), h, t, "linear_attn.in_proj_qkv");
            L.laZ = linearWeight(la.valueWidth(), h, t, "linear_attn.in_proj_z");
            L.laB = linearWeight(la.valueHeads, h, t, "linear_attn.in_proj_b");
            L.laAp = linearWeight(la.valueHeads, h, t, "linear_attn.in_proj_a");
        }
        if (ft.outProjRegisteredFirst && !linearAttn)
            outProj();
        if (linearAttn) {
            // no attention modules
        } else if (m.isMla()) {
            if (m.qLoraRank > 0) {
                L.qa = linearWeight(m.qLoraRank, h, t, "q_a_proj");
                L.qaN = param(m.qLoraRank, 1, t, "q_a_layernorm");
                L.qb2 = linearWeight(checkedMul(H, qk), m.qLoraRank, t, "q_b_proj");
            } else {
                L.q = linearWeight(checkedMul(H, qk), h, t, "q_proj");
            }
            L.kva = linearWeight(m.kvLoraRank + m.qkRopeDim, h, t, "kv_a_proj_with_mqa");
            if (m.qkvBias)
                L.kvaB = linearBias(m.kvLoraRank + m.qkRopeDim, t, "kv_a_proj_with_mqa");
            L.kvaN = param(m.kvLoraRank, 1, t, "kv_a_layernorm");
            L.kvb = linearWeight(checkedMul(H, m.qkNopeDim + m.vHeadDim), m.kvLoraRank, t, "kv_b_proj");
        } else if (m.fusedQkv) { // one Linear: q, k and v side by side in its output
            L.q = linearWeight(qOut + 2 * kvOut, h, t, "qkv_proj");
            if (m.qkvBias)
                L.qb = linearBias(qOut + 2 * kvOut, t, "qkv_proj");
        } else if (ft.valueNorm) {
            // Gemma4TextAttention.__init__: q_proj, q_norm, k_norm, (v_norm has no weight), k_proj,
            // v_proj (none on a global layer with attention_k_eq_v), then o_proj.
            // A key/value-sharing layer has q_proj, q_norm and o_proj only.
            L.q = linearWeight(qOut, h, t, "q_proj");
            L.qn = param(hd, 1, t, "q_norm");
            if (m.attentionAt(l).keyProjection) {
                L.kn = param(hd, 1, t, "k_norm");
                L.k = linearWeight(kvOut, h, t, "k_proj");
            }
            if (m.attentionAt(l).valueProjection)
                L.v = linearWeight(kvOut, h, t, "v_proj");
        } else {
            const int64_t qRows = ft.attentionOutputGate ? 2 * qOut : qOut; // the queries and their gates
            L.q = linearWeight(qRows, h, t, "q_proj");
            if (m.qkvBias)
                L.qb = linearBias(qRows, t, "q_proj");
            L.k = linearWeight(kvOut, h, t, "k_proj");
            if (m.qkvBias)
                L.kb = linearBias(kvOut, t, "k_proj");
            L.v = linearWeight(kvOut, h, t, "v_proj");
            if (m.qkvBias)
                L.vb = linearBias(kvOut, t, "v_proj");
        }
        if (!ft.outProjRegisteredFirst && !linearAttn)
            outProj();
        if (ft.attentionSinks)
            L.sinks = param(heads, 1, t, "self_attn.sinks");
        if (m.qkNorm && !linearAttn && !ft.valueNorm) {
            const bool projection = ft.qkNorm == QkNorm::Projection; // OLMo 2/3: over all heads
            L.qn = param(projection ? qOut : hd, 1, t, "q_norm");
            L.kn = param(projection ? kvOut : hd, 1, t, "k_norm");
        }
    }

    // A decoder layer's modules, in registration order (model.parameters() follows it).
    void buildLayer(int64_t l)
    {
        S.setLayer(static_cast<int>(l));
        useGeometry(l);
        LayerParams &L = layers[static_cast<size_t>(l)];
        const bool t = full;
        const int64_t I = m.mlpWidth(l);
        const bool layerNorm = m.norm == NormKind::LayerNorm;
        if (ft.normRegisteredFirst) { // GPT-2 / NeoX build the first norm before attention
            L.n1 = param(h, 1, t, "input_layernorm");
            L.n1b = param(h, 1, t, "input_layernorm");
        }
        buildMixer(L, l);
        if (m.isMoeLayer(l)) {
            const int64_t E = m.numExperts, Ie = m.expertIntermediateSize, Is = m.sharedExpertIntermediateSize;
            // Module registration order: Qwen3MoeSparseMoeBlock and DeepSeek's MoE make their
            // experts before the router, the others the router first.
            const bool expertsFirst = ft.expertsBeforeRouter;
            if (!expertsFirst)
                L.router = param(E, h, t, "router");
            if (ft.gptOssExperts) // GptOssTopKRouter's bias; each expert's gate_up and down bias
                L.routerB = param(E, 1, t, "router.bias");
            L.gateUp = param(checkedMul(E, 2 * Ie), h, t, "experts.gate_up_proj");
            if (ft.gptOssExperts)
                L.gateUpB = param(E, 2 * Ie, t, "experts.gate_up_proj_bias");
            L.expDown = param(checkedMul(E, h), Ie, t, "experts.down_proj");
            if (ft.gptOssExperts)
                L.expDownB = param(E, h, t, "experts.down_proj_bias");
            if (expertsFirst)
                L.router = param(E, h, t, "router");
            if (ft.sigmoidRouter) { // DeepseekV3TopkRouter's e_score_correction_bias buffer (fp32)
                S.setOp("e_score_correction_bias");
                L.routerBias = S.make(E * 4, 4, Category::Weights);
                buffers.push_back(L.routerBias);
            }
            if (Is > 0) {
                L.gate = linearWeight(Is, h, t, "shared_expert.gate_proj");
                L.up = linearWeight(Is, h, t, "shared_expert.up_proj");
                L.down = linearWeight(h, Is, t, "shared_expert.down_proj");
            }
            if (m.sharedExpertGate)
                L.sharedGate = linearWeight(1, h, t, "shared_expert_gate");
        } else {
            if (m.fusedGateUp) {
                L.gate = linearWeight(2 * I, h, t, "gate_up_proj");
            } else {
                if (m.mlp == MlpKind::Gated)
                    L.gate = linearWeight(I, h, t, "gate_proj");
                L.up = linearWeight(I, h, t, "up_proj");
                if (m.mlpBias)
                    L.upB = linearBias(I, t, "up_proj");
            }
            L.down = linearWeight(h, I, t, "down_proj");
            if (m.mlpBias)
                L.downB = linearBias(h, t, "down_proj");
        }
        if (!ft.normRegisteredFirst && ft.norms != NormPlacement::Post) {
            L.n1 = param(h, 1, t, "input_layernorm", normElem());
            if (layerNorm)
                L.n1b = param(h, 1, t, "input_layernorm");
        }
        if (!ft.parallelSharedNorm) {
            L.n2 = param(h, 1, t, "post_attention_layernorm", normElem());
            if (layerNorm)
                L.n2b = param(h, 1, t, "post_attention_layernorm");
        }
        if (ft.norms == NormPlacement::Sandwich)
            L.n3 = param(h, 1, t, "pre_feedforward_layernorm");
        if (ft.norms != NormPlacement::Pre)
            L.n4 = param(h, 1, t, "post_feedforward_layernorm");
        if (ft.layerScalar) { // Gemma 4's layer_scalar buffer
            S.setOp("layer_scalar");
            buffers.push_back(S.make(buildElem(), buildElem(), Category::Weights));
        }
        if (m.hasPerLayerInputs()) { // Gemma 4: the layer's gate and projection of its per-layer input
            L.pliGate = linearWeight(m.perLayerInputSize, h, t, "per_layer_input_gate");
            L.pliProj = linearWeight(h, m.perLayerInputSize, t, "per_layer_projection");
            L.pliNorm = param(h, 1, t, "post_per_layer_input_norm");
        }
        recordRegistration(L);
    }

    // Multi-head latent attention's Linears in mlaLinearNames() order (mlaLora's too).
    static std::array<T *, kMlaLinears> mlaLinears(LayerParams &L) { return {&L.qa, &L.qb2, &L.kva, &L.kvb}; }

    // Qwen3.5's gated DeltaNet Linears in sim::DeltaNetProjection order (laLora's order too).
    static std::array<T *, kLinearAttentionLinears> deltaNetLinears(LayerParams &L)
    {
        return {&L.laQkv, &L.laZ, &L.laB, &L.laAp, &L.laOut};
    }

    // The layer's Linears LoRA wraps, in the order PEFT meets them (named_modules(): registration,
    // so Phi-3's o_proj before its qkv_proj).
    struct AdaptedLinear
    {
        LoraPair *pair;
        int64_t in, out;
    };
    std::vector<AdaptedLinear> adaptedLinears(LayerParams &L)
    {
        std::vector<std::pair<const T *, AdaptedLinear>> found;
        const std::array<const T *, kLinearModuleCount> weights = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
        const int64_t l = &L - layers.data();
        for (int mod = 0; mod < kLinearModuleCount; ++mod)
            if (loraMask[static_cast<size_t>(mod)] && present(mod) && weights[static_cast<size_t>(mod)]->valid())
                found.push_back({weights[static_cast<size_t>(mod)],
                                 {&L.lora[static_cast<size_t>(mod)], linearInFeatures(m, LinearModule(mod), l),
                                  linearOutFeatures(m, LinearModule(mod), l)}});
        const auto mlaWeights = mlaLinears(L);
        for (size_t i = 0; i < mlaWeights.size(); ++i)
            if (mlaMask[i] && mlaWeights[i]->valid())
                found.push_back({mlaWeights[i], {&L.mlaLora[i], mlaWeights[i]->cols, mlaWeights[i]->rows}});
        const auto pliShapes = perLayerInputLinearShapes(m);
        for (size_t i = 0; i < L.pliLora.size(); ++i) {
            const T &w = i == 0 ? L.pliGate : L.pliProj;
            if (pliMask[i] && w.valid())
                found.push_back({&w, {&L.pliLora[i], pliShapes[i].first, pliShapes[i].second}});
        }
        const auto laWeights = deltaNetLinears(L);
        for (size_t i = 0; i < laWeights.size(); ++i)
            if (laMask[i] && laWeights[i]->valid())
                found.push_back({laWeights[i], {&L.laLora[i], laWeights[i]->cols, laWeights[i]->rows}});
        if (sharedGateMask && L.sharedGate.valid())
            found.push_back({&L.sharedGate, {&L.sharedGateLora, h, 1}});
        const auto &r = L.registered;
        auto rank = [&](const T *w) { return std::find(r.begin(), r.end(), w) - r.begin(); };
        std::stable_sort(found.begin(), found.end(), [&](const auto &a, const auto &b) { return rank(a.first) < rank(b.first); });
        std::vector<AdaptedLinear> out;
        for (const auto &f : found)
            out.push_back(f.second);
        return out;
    }

    // See Note [PEFT adapter load] (docs/estimator.md).
    void injectAdapters()
    {
        // get_peft_model (PEFT 0.21): an A and a B per targeted Linear of every layer, then per
        // targeted experts Parameter (target_parameters are injected after the modules), each
        // made on the base weight's device in its dtype (_move_adapter_to_device_of_base_layer);
        // then cast_adapter_dtype (autocast_adapter_dtype=True) makes each fp32, layer by
        // layer in module order, and the first copy goes (the H200 streams' load: "convert",
        // then cast_adapter_dtype). Already fp32 (fp32 and autocast runs), nothing is cast.
        // QLoRA's base weights are 4-bit: the first copies take the 16-bit compute dtype, with
        // autocast too, and are cast like the others (every *-qlora16-* stream of the corpus but
        // GPT-2's, whose Conv1D is fp32 there: nothing is cast).
        struct Adapter
        {
            int64_t layer;
            LoraPair *pair;
            std::array<std::pair<int64_t, int64_t>, 2> shape; // A, then B: [rows, cols]
            bool experts;                                      // a ParamWrapper's (target_parameters)
            T a16, b16;                                        // the first copies, in the base dtype
            bool vision = false;                               // on the tower (Note [Vision LoRA])
        };
        std::vector<Adapter> order; // the fp32 cast's order: the tower's, then per layer, modules then experts
        if (visionSim) { // the tower's blocks, then its merger, in module order
            towerLora.on = visionLora(m, c);
            towerLora.rank = c.lora.rank;
            towerLora.dropout = c.lora.dropout;
            towerPairs.assign(static_cast<size_t>(towerLora.on.adapters()), LoraPair{});
            size_t k = 0;
            const auto add = [&](bool on, std::pair<int64_t, int64_t> shape) {
                if (on)
                    order.push_back({-1, &towerPairs[k++], {{{c.lora.rank, shape.first}, {shape.second, c.lora.rank}}},
                                     false, {}, {}, true});
            };
            for (int64_t l = 0; l < towerLora.on.blocks && towerLora.any(); ++l)
                for (size_t i = 0; i < towerLora.on.block.size(); ++i)
                    add(towerLora.on.block[i], towerLora.on.blockShapes[i]);
            for (size_t i = 0; i < towerLora.on.merger.size(); ++i)
                add(towerLora.on.merger[i], towerLora.on.mergerShapes[i]);
        }
        for (int64_t l = 0; l < m.numLayers; ++l) {
            LayerParams &L = layers[static_cast<size_t>(l)];
            for (const AdaptedLinear &al : adaptedLinears(L))
                order.push_back({l, al.pair, {{{c.lora.rank, al.in}, {al.out, c.lora.rank}}}, false, {}, {}});
            if (m.isMoeLayer(l)) { // the experts' ParamWrappers: gate_up's pair, then down's
                const auto shapes = expertsLoraShapes(m, expertsWrapped, c.lora.rank);
                size_t k = 0;
                for (LoraPair *p : {&L.gateUpLora, &L.downLora}) {
                    if (p == &L.gateUpLora ? !expertsWrapped.gateUp : !expertsWrapped.down)
                        continue;
                    order.push_back({l, p, {{shapes[k], shapes[k + 1]}}, true, {}, {}});
                    k += 2;
                }
            }
        }
        if (pliMask[2] && pliModelProj.valid()) { // Gemma 4's per_layer_model_projection, after the layers
            const auto [in, out] = perLayerInputLinearShapes(m)[2];
            order.push_back({-1, &pliModelLora, {{{c.lora.rank, in}, {out, c.lora.rank}}}, false, {}, {}});
        }
        auto fp32 = [&](Adapter &ad) {
            const sim::PartScope part(S, ad.vision ? ModelPart::Vision : ModelPart::Language); // Note [Vision share]
            S.setLayer(static_cast<int>(ad.layer));
            ad.pair->a = param(ad.shape[0].first, ad.shape[0].second, true, "lora_A", kLoraElem);
            if (ad.a16.valid())
                S.drop(ad.a16);
            ad.pair->b = param(ad.shape[1].first, ad.shape[1].second, true, "lora_B", kLoraElem);
            if (ad.b16.valid())
                S.drop(ad.b16);
            ad.pair->on = true;
        };
        // The base layer's weight dtype: a Linear4bit's is its 16-bit compute dtype; GPT-2's Conv1D
        // stays a float module, fp32 under QLoRA (prepare_model_for_kbit_training).
        const int firstElem = !qlora ? pe : ft.conv1dLinears ? 4 : 2;
        const bool cast = firstElem != kLoraElem;
        auto firstCopy = [&](Adapter &ad) {
            if (!cast)
                return fp32(ad);
            const sim::PartScope part(S, ad.vision ? ModelPart::Vision : ModelPart::Language);
            S.setLayer(static_cast<int>(ad.layer));
            S.setOp("lora (base dtype)");
            ad.a16 = S.make(checkedMul(checkedMul(ad.shape[0].first, ad.shape[0].second), firstElem), firstElem);
            ad.b16 = S.make(checkedMul(checkedMul(ad.shape[1].first, ad.shape[1].second), firstElem), firstElem);
        };
        for (bool experts : {false, true}) // target_modules, then target_parameters
            for (Adapter &ad : order)
                if (ad.experts == experts)
                    firstCopy(ad);
        if (cast)
            for (Adapter &ad : order)
                fp32(ad);
        S.setLayer(-1);
        for (const LoraPair &p : towerPairs) {
            towerLora.adapters.push_back(p.a);
            towerLora.adapters.push_back(p.b);
        }
    }

    void load()
    {
        S.setPhase(0, Phase::AfterLoad, 0);
        S.setLayer(-1);
        S.setOnHost(par->buildsOnHost()); // FSDP2: on the CPU until fully_shard moves each unit
        const bool t = full;
        if (visionSim)
            buildTower();
        embed = param(V, h, t, "embed_tokens");
        if (m.learnedPositions)
            positions = param(m.maxPositions, h, t, "embed_positions");
        layers.resize(static_cast<size_t>(m.numLayers));
        for (int64_t l = 0; l < m.numLayers; ++l)
            buildLayer(l);
        useGeometry(-1);
        S.setLayer(-1);
        finalNorm = param(h, 1, t, "norm", normElem());
        if (m.norm == NormKind::LayerNorm)
            finalNormB = param(h, 1, t, "norm");
        // Rotary inv_freq and its original copy (fp32 buffers); Gemma 4 keeps a pair per layer
        // type (sorted: full_attention's, then sliding_attention's), each of its geometry's width.
        if (!m.learnedPositions) {
            S.setOp("rotary_emb");
            std::vector<int64_t> widths = {hd};
            if (!m.globalLayers.empty())
                widths = {m.attentionAt(m.numLayers - 1).headDim, m.headDim};
            for (int64_t d : widths) {
                buffers.push_back(S.make(d / 2 * 4, 4, Category::Weights));
                buffers.push_back(S.make(d / 2 * 4, 4, Category::Weights));
            }
        }
        if (m.hasPerLayerInputs()) {
            // Gemma4TextModel's per-layer inputs, registered after the rotary embedding.
            const int64_t P = m.perLayerInputSize, LP = checkedMul(m.numLayers, P);
            pliEmbed = param(m.perLayerVocab, LP, t, "embed_tokens_per_layer");
            pliModelProj = linearWeight(LP, h, t, "per_layer_model_projection");
            pliProjNorm = param(P, 1, t, "per_layer_projection_norm");
        }
        if (m.tiedEmbeddings) {
            // HF builds the lm_head's own nn.Linear weight in __init__ and post_init's
            // tie_weights() then points it at the embedding, freeing the first one (measured:
            // modules/linear.py __init__, V x h, freed at once, on every tied model). The hole it
            // leaves is where the first small blocks of the run go.
            S.setOp("lm_head");
            T untied = S.make(checkedMul(checkedMul(V, h), buildElem()), buildElem(), Category::Weights);
            S.drop(untied);
            lmHead = embed;
        } else if (m.scoreLabels > 0) {
            lmHead = param(m.scoreLabels, h, t, "score"); // AutoModelForSequenceClassification's head
        } else {
            lmHead = param(V, h, t, "lm_head");
            if (m.lmHeadBias)
                lmHeadB = param(V, 1, t, "lm_head");
        }
        if (qlora)
            quantizeForQlora();
        if (!full)
            injectAdapters();
        if (!full && m.scoreLabels > 0) {
            // PEFT's task_type SEQ_CLS puts score in modules_to_save: the original stays, frozen,
            // and a trainable copy (ModulesToSaveWrapper) runs in forward
            scoreFrozen = lmHead;
            lmHead = param(m.scoreLabels, h, true, "score");
        }
        collectTrainable();
        S.setOnHost(false);
        sim::ParallelModel pm{units(), &buffers, trainable};
        stepped = par->wrap(pm);
        if (m.tiedEmbeddings)
            lmHead = embed;
        if ((dpo || kto || grpo) && c.dpo.reference == Reference::Copy) {
            // TRL's trainer builds the reference in its __init__, as the policy was built: the
            // same parameters and buffers again, frozen
            S.setOp("dpo.reference_model");
            for (const T *p : trainable)
                referenceWeights.push_back(S.make(p->bytes, p->elem, Category::ReferenceModel));
            for (const T &buf : buffers)
                referenceWeights.push_back(S.make(buf.bytes, buf.elem, Category::ReferenceModel));
        }
        S.setOp("input_ids");
        if (grpo) { // the generation batch's prompts and their attention mask, on the device
            prompts = S.make(checkedMul(gs.completions, gs.prompt) * 8, 8);
            promptMask = S.make(prompts.bytes, 8);
            for (int64_t i = 0; i < c.gradAccum; ++i)
                batches.push_back(S.view(prompts));
            return;
        }
        for (int64_t i = 0; i < c.gradAccum; ++i) {
            const std::vector<std::pair<int64_t, int>> tensors = batchTensors();
            batches.push_back(S.make(tensors[0].first, tensors[0].second, Category::Temporaries));
            for (size_t k = 1; k < tensors.size(); ++k)
                batchRest.push_back(S.make(tensors[k].first, tensors[k].second, Category::Temporaries));
        }
    }

    // A micro-batch as the engine puts it on the device before the step, (bytes, element size)
    // each, in the order it makes them: the ids the embedding reads first, then what the mode's
    // loss reads beside them (issue 29).
    std::vector<std::pair<int64_t, int>> batchTensors() const
    {
        const int64_t ids = checkedMul(orpo ? tok / 2 : tok, 8);
        std::vector<std::pair<int64_t, int>> t{{ids, 8}};
        if (visionSim) {
            // the engine's vision batch (probes/hrengine/vision.py): labels with the placeholders
            // masked, the processor's fp32 pixel rows and (t, h, w) grids, images then video, and
            // mm_token_type_ids
            t.push_back({ids, 8});
            const int64_t width = m.vision.tower.inputWidth;
            if (m.vision.tokens == ModelArch::VisionSide::Tokens::Fixed) { // (b x images, C, size, size)
                if (c.vision.images > 0)
                    t.push_back({checkedMul(checkedMul(checkedMul(c.vision.images, b), width),
                                            checkedMul(m.vision.imageSize, m.vision.imageSize)) * 4, 4});
                if (m.vision.tower.kind == ModelArch::VisionSide::Tower::Kind::Siglip) // Gemma 3's token_type_ids
                    t.push_back({ids, 8});
                return t;
            }
            if (c.vision.images > 0) {
                t.push_back({checkedMul(checkedMul(vt.imagePatches, c.vision.images * b), width) * 4, 4});
                t.push_back({c.vision.images * b * 3 * 8, 8});
            }
            if (c.vision.videos > 0) {
                t.push_back({checkedMul(checkedMul(vt.videoPatches, c.vision.videos * b), width) * 4, 4});
                t.push_back({c.vision.videos * b * 3 * 8, 8});
            }
            t.push_back({ids, 8});
            return t;
        }
        if (dpo || reward) // DPO's completion mask, the reward batch's attention mask
            t.push_back({ids, 8});
        if (orpo) // the chosen ids' masks and labels, the rejected ids, masks and labels: b x seq each
            t.insert(t.end(), 5, {ids, 8});
        if (kto) { // the attention and completion masks, the KL batch's ids and masks, the labels
            t.insert(t.end(), 5, {ids, 8});
            t.push_back({b, 1});
            if (c.dpo.reference == Reference::None) // the precomputed log-probabilities
                t.insert(t.end(), 2, {checkedMul(b, 4), 4});
        }
        return t;
    }

    // A decoder layer's parameters in model.parameters() order: each adapted Linear's base
    // weight (and bias), then its lora_A and lora_B (PEFT's lora.Linear registers base_layer first).
    std::vector<T *> layerUnitParameters(LayerParams &L)
    {
        const std::array<std::pair<T *, T *>, kLinearModuleCount> mods = {
            std::pair{&L.q, &L.qb}, {&L.k, &L.kb}, {&L.v, &L.vb}, {&L.o, &L.ob}, {&L.gate, nullptr}, {&L.up, &L.upB},
            {&L.down, &L.downB}};
        std::array<bool, kLinearModuleCount> placed{};
        std::vector<T *> out;
        for (T *t : layerParameters(L)) {
            if (!t->valid())
                continue;
            out.push_back(t);
            for (size_t m = 0; m < mods.size(); ++m) {
                LoraPair &pair = L.lora[m];
                const bool last = mods[m].second && mods[m].second->valid() ? t == mods[m].second : t == mods[m].first;
                if (last && pair.on && !placed[m]) {
                    out.push_back(&pair.a);
                    out.push_back(&pair.b);
                    placed[m] = true;
                }
            }
            const auto laWeights = deltaNetLinears(L);
            for (size_t i = 0; i < laWeights.size(); ++i)
                if (t == laWeights[i] && L.laLora[i].on) {
                    out.push_back(&L.laLora[i].a);
                    out.push_back(&L.laLora[i].b);
                }
            for (auto [w, pair] : {std::pair{&L.sharedGate, &L.sharedGateLora}, {&L.pliGate, &L.pliLora[0]},
                                   {&L.pliProj, &L.pliLora[1]}, {&L.qa, &L.mlaLora[0]}, {&L.qb2, &L.mlaLora[1]},
                                   {&L.kva, &L.mlaLora[2]}, {&L.kvb, &L.mlaLora[3]}})
                if (t == w && pair->on) {
                    out.push_back(&pair->a);
                    out.push_back(&pair->b);
                }
        }
        for (size_t m = 0; m < L.lora.size(); ++m)
            if (L.lora[m].on && !placed[m]) {
                out.push_back(&L.lora[m].a);
                out.push_back(&L.lora[m].b);
            }
        for (LoraPair *p : {&L.gateUpLora, &L.downLora}) // (estimate() refuses FSDP with these)
            if (p->on) {
                out.push_back(&p->a);
                out.push_back(&p->b);
            }
        return out;
    }

    // The model as a parallel strategy wraps it: the root's parameters (embeddings, final norm,
    // an untied lm_head), then each decoder layer's.
    std::vector<std::vector<T *>> units()
    {
        std::vector<std::vector<T *>> out(layers.size() + 1);
        for (size_t l = 0; l < layers.size(); ++l)
            out[l + 1] = layerUnitParameters(layers[l]);
        for (T *t : {&embed, &positions, &finalNorm, &finalNormB, &pliEmbed, &pliModelProj, &pliModelLora.a,
                     &pliModelLora.b, &pliProjNorm, &scoreFrozen, m.tiedEmbeddings ? nullptr : &lmHead, &lmHeadB})
            if (t && t->valid())
                out[0].push_back(t);
        return out;
    }

    bool present(int mod) const { return !linearModuleNames(m)[static_cast<size_t>(mod)].empty(); }
    int64_t inFeatures(int mod) const { return linearInFeatures(m, LinearModule(mod)); }
    int64_t outFeatures(int mod) const { return linearOutFeatures(m, LinearModule(mod)); }

    void collectTrainable()
    {
        auto add = [this](T &t) {
            if (t.valid() && t.requiresGrad)
                trainable.push_back(&t);
        };
        for (T &t : towerWeights) // the composite model's vision side comes first
            add(t);
        for (LoraPair &p : towerPairs) { // its adapters registered after each base layer's weights
            add(p.a);
            add(p.b);
        }
        add(embed);
        add(positions);
        for (auto &L : layers) {
            for (T *t : layerParameters(L))
                add(*t);
            for (const AdaptedLinear &al : adaptedLinears(L)) { // the adapters in module order
                add(al.pair->a);
                add(al.pair->b);
            }
            for (LoraPair *p : {&L.gateUpLora, &L.downLora})
                if (p->on) {
                    add(p->a);
                    add(p->b);
                }
        }
        add(finalNorm);
        add(finalNormB);
        for (T *t : {&pliEmbed, &pliModelProj, &pliModelLora.a, &pliModelLora.b, &pliProjNorm})
            add(*t);
        if (!m.tiedEmbeddings)
            add(lmHead);
        add(lmHeadB);
    }

    // ------------------------------------------------------------------ forward
    // See Note [Autocast cast cache] (docs/estimator.md).
    // A weight as the matmul sees it: under autocast a bf16 copy, cached for the whole forward
    // when the weight is a trainable leaf, made anew at every use otherwise.
    T weightFor(const T &w)
    {
        if (!amp)
            return S.view(w);
        if (w.requiresGrad) {
            auto it = ampCache.find(w.sto);
            if (it != ampCache.end())
                return S.view(it->second);
            T cast = O.to(w, 2);
            ampCache[w.sto] = cast;
            return S.view(cast);
        }
        return O.to(w, 2);
    }

    void clearAmpCache()
    {
        for (auto &[k, t] : ampCache)
            S.drop(t);
        ampCache.clear();
    }

    // nn.Linear (or PEFT's lora.Linear around it) over `tok` rows of x.
    T linear(const T &x, int mod, const T &w, const T *bias, LoraPair *lora)
    {
        // The weight's own shape (a parameter knows it); a layer's dense MLP in an MoE model
        // is wider than the shared experts' that inFeatures names.
        const int64_t in = w.cols > 0 ? w.cols : inFeatures(mod), out = w.rows > 0 ? w.rows : outFeatures(mod);
        // Autocast's cached_cast runs over F.linear's arguments in the order GCC evaluates
        // function arguments, last first: bias, weight, then input (H200 streams: the weight's
        // bf16 copy is allocated before the input's).
        T y;
        if (w.nf4) {
            // Linear4bit.forward: x.to(compute_dtype), matmul_4bit (the bias rides in F.linear),
            // .to(the input's dtype).
            T xc = O.to(x, qe);
            T yq = O.linear4bit(xc, tok, in, out, qe, c.lora.doubleQuant, bias && bias->valid());
            y = O.to(yq, x.elem);
            S.drop(yq);
            S.drop(xc);
            if (lora && lora->on) { // PEFT's lora/bnb.py Linear4bit: result = result.clone()
                T yc = O.copy(y);
                S.drop(y);
                y = yc;
            }
        } else {
            T bc;
            if (bias && bias->valid())
                bc = amp ? weightFor(*bias) : S.view(*bias);
            T wc = weightFor(w);
            T xin = amp ? O.to(x, 2) : S.view(x);
            y = O.linear(xin, wc, bc.valid() ? &bc : nullptr, tok, in, out, amp ? 2 : ce);
            S.drop(xin);
            S.drop(wc);
            if (bc.valid())
                S.drop(bc);
        }
        if (!lora || !lora->on || adaptersOff)
            return y;
        // What the adapter allocates is LoRA's in the timeline, the module's name again after it
        // (See Note [Layer and op labels]).
        const uint16_t module = S.opIndex();
        S.setOp("lora");
        // PEFT lora.Linear.forward: x cast to the adapters' dtype, dropout, lora_B(lora_A(x)) *
        // scaling, added to the base result, cast back to the base result's dtype.
        // PEFT's _cast_input_dtype: x.to(lora_A.weight.dtype) whenever the dtypes differ (also
        // under autocast, where o_proj's and down_proj's inputs are bf16). PEFT's bnb Linear4bit
        // casts only without autocast (lora/bnb.py: requires_conversion = not
        // torch.is_autocast_enabled()): under QLoRA with autocast lora_A reads x as it comes.
        // PEFT's bnb Linear4bit adds the adapters' output without casting the sum back.
        const Ops::LoraCall call{tok, in, out, c.lora.rank, c.lora.dropout, !(w.nf4 && amp), amp,
                                 w.nf4 ? 0 : amp ? 2 : ce};
        T res = O.loraAdd(y, x, lora->a, lora->b, call, [this](const T &t) { return weightFor(t); });
        S.setOpIndex(module);
        return res;
    }

    // LlamaRMSNorm: x.to(fp32); x * rsqrt(mean(x^2) + eps); weight * x.to(input dtype).
    // `rows` rows of `width` values; `weight` broadcast over the rows.
    T rmsnorm(const T &x, const T &weight, int64_t rows, int64_t width)
    {
        S.setOp("rmsnorm");
        const int64_t n = checkedMul(rows, width);
        T x32 = O.to(x, 4);
        T var;
        const bool inlineMean = ft.rms == RmsNormStyle::Gemma || ft.rms == RmsNormStyle::Gemma4;
        T xn = O.rmsNormalize(x32, rows, inlineMean, var, ft.rms == RmsNormStyle::Gemma4); // see the Gemma branch below
        S.drop(x32);
        T out;
        if (ft.rms == RmsNormStyle::Gemma4 && !weight.valid()) {
            // Gemma4RMSNorm(with_scale=False), the values' v_norm: only the cast back.
            out = O.to(xn, x.elem);
            S.drop(xn);
        } else if (ft.rms == RmsNormStyle::Gemma4) {
            // Gemma4RMSNorm: normed_output * self.weight.float(), then type_as(x). The fp32 weight
            // is made after the normalised x and kept by the product's node.
            T wf = O.to(weight, 4);
            T y = O.mul(xn, wf, n, 4, true, false, rows);
            S.drop(wf);
            S.drop(xn);
            out = O.to(y, x.elem);
            S.drop(y);
        } else if (ft.rms == RmsNormStyle::Olmo) {
            // Olmo2RMSNorm: (self.weight * hidden_states).to(input_dtype): the product in fp32
            // (MulBackward0 saves the weight and the fp32 normalised x), then the cast.
            T y = O.mul(weight, xn, n, 4, false, true, rows);
            out = O.to(y, x.elem);
            S.drop(y);
            S.drop(xn); // `hidden_states` goes when forward returns
        } else if (ft.rms == RmsNormStyle::Gemma) {
            // Gemma: output * (1.0 + self.weight.float()), in fp32, then cast back. Its _norm is
            // one expression, `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)`: the
            // mean is a temporary, gone once the sum is made (the no-grad pass of a checkpointed
            // Qwen3.5 layer shows it), not a local kept to the end as Llama's `variance`.
            T wf = O.to(weight, 4);
            T w1 = O.addScalar(wf);
            S.drop(wf);
            T y = O.mul(xn, w1, n, 4, true, false, rows);
            S.drop(w1);
            S.drop(xn);
            out = O.to(y, x.elem);
            S.drop(y);
        } else {
            T xb = O.to(xn, x.elem);
            out = O.mul(weight, xb, n, std::max(weight.elem, x.elem), false, true, rows);
            S.drop(xb);
            S.drop(xn); // `hidden_states` goes when the function returns
        }
        if (var.valid())
            S.drop(var);
        return out;
    }

    // CohereLayerNorm (FamilyTraits::meanCentredNormFp32), as the H200 stream of cohere2 orders it:
    // x.float(); mean; ((x - mean) ** 2).mean(); (x - mean) * rsqrt(var + eps); weight.float() * that;
    // .to(input_dtype). pow keeps the first difference, the product the second and the rsqrt, the
    // weight's product the fp32 weight and the normalised x; x.float() goes when the name rebinds.
    T meanCentredNorm(const T &x, const T &w)
    {
        S.setOp("layernorm");
        const int64_t n = checkedMul(tok, h);
        T xf = O.to(x, 4);
        T mu = O.mean(xf, tok);
        T a = O.addBroadcast(xf, mu, xf.bytes, xf.elem, true);
        T p = O.pow2(a);
        T var = O.mean(p, tok);
        S.drop(p);
        S.drop(a);
        T d = O.addBroadcast(xf, mu, xf.bytes, xf.elem, true);
        T ve = O.addScalar(var);
        T r = O.rsqrt(ve);
        S.drop(ve);
        T e = O.mul(d, r, n, 4, true, false, 0);
        S.drop(d);
        S.drop(r);
        S.drop(xf);
        T wf = O.to(w, 4);
        T f = O.mul(wf, e, n, 4, false, true, tok);
        S.drop(wf);
        S.drop(e);
        T out = O.to(f, x.elem);
        S.drop(f);
        S.drop(mu);
        S.drop(var);
        return out;
    }

    // nn.LayerNorm: native_layer_norm saves its input, per-row mean and rstd (fp32).
    T layernorm(const T &x, const T &weight, const T &bias)
    {
        S.setOp("layernorm");
        return O.layerNorm(x, weight, bias, tok, h, amp ? 4 : x.elem);
    }

    T norm(const T &x, const T &w, const T &bias)
    {
        if (m.norm == NormKind::LayerNorm)
            return layernorm(x, w, bias);
        if (ft.meanCentredNormFp32)
            return meanCentredNorm(x, w);
        return rmsnorm(x, w, tok, h);
    }

    // rotate_half(x) over its n elements: two halves (views; Llama's x[..., :d/2], x[..., d/2:], or
    // GLM's even and odd features), -x2, then torch.cat or torch.stack with x1: one new tensor.
    T rotateHalf(const T &x, int64_t n)
    {
        T x1 = O.slice(x, n / 2);
        T x2 = O.slice(x, n / 2);
        T nx2 = O.neg(x2);
        T rot = O.cat({&nx2, &x1}, n, x.elem);
        S.drop(nx2);
        S.drop(x1);
        S.drop(x2);
        return rot;
    }

    // apply_rotary_pos_emb: (x * cos) + (rotate_half(x) * sin); cos and sin broadcast over
    // batch and heads.
    T rope(const T &x, const T &cos, const T &sin, int64_t features)
    {
        S.setOp("apply_rotary_pos_emb");
        const int e = std::max(x.elem, cos.elem);
        const int64_t n = checkedMul(tok, features);
        T a = O.mul(x, cos, n, e, true, false, 0);
        T rot = rotateHalf(x, n);
        T bsin = O.mul(rot, sin, n, e, true, false, 0);
        S.drop(rot);
        T out = O.add(a, bsin, e);
        S.drop(bsin);
        S.drop(a);
        return out;
    }

    // DeepSeek-V3's apply_rotary_pos_emb_interleave (Transformers 5.x): cos and sin cut to their
    // first halves and x to its even and odd features (views, kept by the products' nodes), then
    // cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin]); each pair of products goes once its sum is
    // made (H200, tests/data/h200/traced-2026-12-04 deepseek_v3-alt-*: half-size products, no
    // rotated copy kept).
    T ropeHalves(const T &x, const T &cos, const T &sin, int64_t features)
    {
        S.setOp("apply_rotary_pos_emb_interleave");
        const int64_t n = checkedMul(tok, features), half = n / 2;
        const int e = std::max(x.elem, cos.elem);
        T x1 = O.slice(x, half), x2 = O.slice(x, half);
        T a = O.mul(x1, cos, half, e, true, false, 0);
        T b = O.mul(x2, sin, half, e, true, false, 0);
        T first = O.sub(a, b, e);
        S.drop(a);
        S.drop(b);
        T c = O.mul(x2, cos, half, e, true, false, 0);
        T d = O.mul(x1, sin, half, e, true, false, 0);
        T second = O.add(c, d, e);
        S.drop(c);
        S.drop(d);
        T out = O.cat({&first, &second}, n, e);
        S.drop(first);
        S.drop(second);
        S.drop(x1);
        S.drop(x2);
        return out;
    }

    // GLM's interleaved cos and sin: cos[..., :d/2].repeat_interleave(2, -1), sin the same, made
    // per call in the tables' dtype (kept by the products' nodes that use them).
    void interleavedTables(const T &cos, const T &sin, T &ci, T &si)
    {
        const int64_t table = checkedMul(s, rotaryDim()) * cos.elem;
        ci = S.make(table, cos.elem);
        si = S.make(table, sin.elem);
    }

    // GLM-style apply_rotary_pos_emb (FamilyTraits::rotaryInterleaved): the interleaved cos and
    // sin (repeat_interleave of their first halves, kept by the products' nodes), then for q and
    // for k: x.float() * cos + rotate_half(x).float() * sin, rotate_half by torch.stack((-x2, x1)).
    void ropeInterleaved(const T &q, const T &k, const T &cos, const T &sin, T &qe, T &ke)
    {
        S.setOp("apply_rotary_pos_emb");
        if (ft.rotaryInterleavedTables) {
            // Cohere: q = q.float(), k = k.float(); q * cos + rotate_half(q) * sin in fp32 with the
            // tables as given; q_embed.to(dtype), k_embed.to(dtype); the fp32 copies go on return.
            T qf = O.to(q, 4), kf = O.to(k, 4);
            auto one = [&](const T &xf, int64_t features) {
                const int64_t n = checkedMul(tok, features);
                T a = O.mul(xf, cos, n, 4, true, false, 0);
                T rot = rotateHalf(xf, n);
                T b = O.mul(rot, sin, n, 4, true, false, 0);
                S.drop(rot);
                T out = O.add(a, b, 4);
                S.drop(b);
                S.drop(a);
                return out;
            };
            T q32 = one(qf, qOut);
            T k32 = one(kf, kvOut);
            qe = O.to(q32, q.elem);
            ke = O.to(k32, k.elem);
            for (T *t : {&qf, &kf, &q32, &k32})
                S.drop(*t);
            return;
        }
        T ci, si;
        interleavedTables(cos, sin, ci, si);
        auto one = [&](const T &x, int64_t features) {
            const int64_t n = checkedMul(tok, features);
            T xf = O.to(x, 4);
            T a = O.mul(xf, ci, n, 4, true, false, 0);
            S.drop(xf);
            T rot = rotateHalf(x, n);
            T rf = O.to(rot, 4);
            S.drop(rot);
            T b = O.mul(rf, si, n, 4, true, false, 0);
            S.drop(rf);
            T out = O.add(a, b, 4);
            S.drop(b);
            S.drop(a);
            return out;
        };
        qe = one(q, qOut);
        ke = one(k, kvOut);
        S.drop(ci);
        S.drop(si);
    }

    // `headsMajor`: q is laid out (b, heads, s, d) in memory (torch.cat made it), so SDPA's
    // output, which takes q's layout, needs a copy in transpose(1, 2).contiguous()
    // (sdpa_attention.py); after Llama's element-wise rotary q keeps the projection's
    // (b, s, heads, d) layout and the transpose is free.
    // Whether HF hands SDPA an explicit mask: a sliding window no longer than the sequence
    // (masking_utils' _ignore_causal_mask_sdpa keeps is_causal only when kv_length < window).
    // Gemma 2 slides on every other layer (layer_types), Qwen2 only with use_sliding_window.
    bool hasSlidingWindow() const
    {
        return hc.is_object() && hc.contains("sliding_window") && hc.at("sliding_window").is_number_integer() &&
               hc.at("sliding_window").get<int64_t>() > 0;
    }

    bool slidingMask(int64_t layer) const
    {
        return slidesAt(layer) && s >= hc.at("sliding_window").get<int64_t>();
    }

    // Whether SDPA gets the layer's mask: a sliding window's, or Gemma 3's block-causal masks of a
    // step with images (every layer).
    bool explicitMask(int64_t layer) const { return blockMasks[0].valid() || slidingMask(layer); }

    // The mask a layer's SDPA reads (kept by its checkpoint where it is checkpointed).
    const T &layerMask(int64_t layer, const T &sdpaMask) const
    {
        return blockMasks[0].valid() ? blockMasks[slidesAt(layer) ? 1 : 0] : sdpaMask;
    }

    // Whether the layer attends through a sliding window at all, whatever the sequence length.
    bool slidesAt(int64_t layer) const
    {
        if (!hc.is_object() || !hc.contains("sliding_window") || !hc.at("sliding_window").is_number_integer())
            return false;
        if (ft.slidingWindowOptIn &&
            !(hc.contains("use_sliding_window") && hc.at("use_sliding_window").is_boolean() &&
              hc.at("use_sliding_window").get<bool>()))
            return false;
        if (ft.slidingEveryOtherLayer && layer % 2 != 0)
            return false;
        if (ft.slidingLayerTypes && !slidingLayer(layer))
            return false;
        return hc.at("sliding_window").get<int64_t>() > 0;
    }

    // Sliding and full layers side by side: the model builds one mask per kind (Gemma 2 and 3,
    // GPT-OSS: create_causal_mask and create_sliding_window_causal_mask), each materialised
    // for eager attention.
    bool mixedLayerKinds() const
    {
        bool sliding = false, full = false;
        for (int64_t l = 0; l < m.numLayers && !(sliding && full); ++l)
            (slidesAt(l) ? sliding : full) = true;
        return sliding && full;
    }

    // SmolLM3's NoPE layers: config.no_rope_layers[layer] == 0, or without the list every
    // no_rope_layer_interval-th layer (its configuration class's default, 4).
    bool noRope(int64_t layer) const
    {
        if (hc.contains("no_rope_layers") && hc.at("no_rope_layers").is_array()) {
            const nlohmann::json &l = hc.at("no_rope_layers");
            return layer < static_cast<int64_t>(l.size()) && l.at(static_cast<size_t>(layer)).is_number_integer() &&
                   l.at(static_cast<size_t>(layer)).get<int64_t>() == 0;
        }
        int64_t every = 4;
        if (hc.contains("no_rope_layer_interval") && hc.at("no_rope_layer_interval").is_number_integer())
            every = hc.at("no_rope_layer_interval").get<int64_t>();
        return every > 0 && (layer + 1) % every == 0;
    }

    // config.layer_types ("sliding_attention" / "full_attention" per layer); without it Gemma 3's
    // configuration class derives it from sliding_window_pattern (every 6th layer global).
    bool slidingLayer(int64_t layer) const
    {
        if (!m.globalLayers.empty()) // Gemma 4: read with the configuration class's rules
            return layer >= 0 && static_cast<size_t>(layer) < m.globalLayers.size() &&
                   !m.globalLayers[static_cast<size_t>(layer)];
        if (hc.contains("layer_types") && hc.at("layer_types").is_array()) {
            const nlohmann::json &lt = hc.at("layer_types");
            if (layer >= static_cast<int64_t>(lt.size()) || !lt.at(static_cast<size_t>(layer)).is_string())
                return false;
            return lt.at(static_cast<size_t>(layer)).get<std::string>() == "sliding_attention";
        }
        int64_t pattern = ft.slidingPatternDefault;
        if (hc.contains("sliding_window_pattern") && hc.at("sliding_window_pattern").is_number_integer())
            pattern = hc.at("sliding_window_pattern").get<int64_t>();
        return pattern > 0 && (layer + 1) % pattern != 0;
    }

    // transformers' repeat_kv: k or v copied to every head; with one kv head the reshape of the
    // expanded tensor is a view, no copy (ExpandBackward sums the heads' gradients back).
    T repeatKv(const T &x)
    {
        if (kvHeads == 1 && heads > 1) {
            T ex = O.headsView(x, true);
            T full = S.view(ex, x.bytes * heads);
            S.drop(ex);
            return full;
        }
        return kvHeads < heads ? O.repeatKv(x, x.bytes / kvHeads * heads) : S.view(x);
    }

    T attention(const T &q, const T &k, const T &v, bool headsMajor = false, bool masked = false, int64_t dq = 0,
                int64_t dv = 0, const T *sinks = nullptr)
    {
        S.setOp("attention");
        Ops::AttnShape a;
        a.b = b;
        a.s = s;
        a.heads = heads;
        a.kvHeads = m.isMla() ? heads : kvHeads; // MLA: k and v have every head
        a.dq = dq > 0 ? dq : hd;
        a.dv = dv > 0 ? dv : hd;
        const int e = amp ? 2 : ce;
        // See Note [Flash kernels]: no mask (a sliding window is the kernel's argument), the
        // kv heads as they are, and SDPA's flash kernel's buffers.
        const bool flash = c.attention == Attention::Flash;
        if (flash)
            masked = false;
        // With a mask, repeat_kv runs before SDPA, and autocast casts what it made.
        const bool maskedSdpa = masked && c.attention != Attention::Eager && !(e == 4 && kvHeads < heads);
        T qc = amp ? O.to(q, 2) : S.view(q);
        T kc = amp && !maskedSdpa ? O.to(k, 2) : S.view(k);
        T vc = amp && !maskedSdpa ? O.to(v, 2) : S.view(v);
        T out;
        if (c.attention == Attention::Eager) {
            // Gemma 2's attn_logit_softcapping: scores / cap, tanh, * cap (eager_attention_forward).
            Ops::EagerStyle style;
            if (hc.is_object() && hc.contains("attn_logit_softcapping") && hc.at("attn_logit_softcapping").is_number())
                style.softcap = hc.at("attn_logit_softcapping").get<double>();
            if (ft.eagerSoftmaxInDtype) { // modeling_gpt2.eager_attention_forward
                style.softmaxFp32 = false;
                style.stridedQkv = true;
            }
            style.dropout = m.attnDropout;
            style.halfToFloat = c.precision == Precision::FP16 || c.precision == Precision::AmpFP16;
            style.headsMajor = headsMajor;
            std::vector<T> locals;
            style.returned = &attnWeights;
            if (sinks) {
                style.sinks = sinks;
                style.locals = &locals;
            }
            out = O.eagerAttention(qc, kc, vc, eagerMask.valid() ? &eagerMask : nullptr, a, e, style);
            // attn_output.transpose(1, 2).contiguous(): a copy
            T cont = O.copy(out);
            S.drop(out);
            out = cont;
            for (T &t : locals)
                S.drop(t);
        } else if (!flash && ft.sdpaExplicitMask && kvHeads < heads) {
            out = O.sdpaMathMasked(qc, kc, vc, a, e);
            // attn_output.view(...).permute(0, 2, 1, 3).reshape(b, s, hidden): a copy
            T cont = O.copy(out);
            S.drop(out);
            out = cont;
        } else if (!flash && e == 4 && kvHeads < heads) {
            out = O.sdpaMath(qc, kc, vc, a, e);
            T cont = O.copy(out);
            S.drop(out);
            out = cont;
        } else if (masked) {
            // sdpa_attention_forward with a mask: repeat_kv copies k and v to every head
            // (use_gqa_in_sdpa needs mask None), SDPA turns the boolean mask into an additive one
            // of (b, 1, s, s), and runs the memory-efficient kernel.
            T kr = repeatKv(kc), vr = repeatKv(vc);
            if (amp) { // autocast's casts of what repeat_kv made (a no-op for what is bf16 already)
                T kb = O.to(kr, 2), vb = O.to(vr, 2);
                S.drop(kr);
                S.drop(vr);
                kr = kb;
                vr = vb;
            }
            T t1 = S.make(2, 2), t2 = S.make(2, 2);
            T bias = S.make(checkedMul(checkedMul(b, s), s) * e, e);
            S.drop(t2);
            S.drop(t1);
            a.kvHeads = heads;
            out = O.sdpaEfficient(qc, kr, vr, a, e, &bias);
            S.drop(bias);
            S.drop(kr);
            S.drop(vr);
        } else if (!flash && std::max(a.dq, a.dv) > 256) {
            // See Note [Wide-head SDPA] (docs/estimator.md): heads wider than flash takes (Gemma 4's
            // global layers: 512). sdpa_attention.py's use_gqa_in_sdpa wants head_dim <= 256, so
            // repeat_kv copies k and v to every head; then the memory-efficient kernel.
            T kr = repeatKv(kc), vr = repeatKv(vc);
            a.kvHeads = heads;
            out = O.sdpaEfficient(qc, kr, vr, a, e, nullptr, e == 2);
            S.drop(kr);
            S.drop(vr);
        } else {
            // Flash needs one head size for q, k and v; MLA's v is narrower: memory-efficient.
            const bool efficient = !flash && (e == 4 || a.dq != a.dv);
            out = efficient ? O.sdpaEfficient(qc, kc, vc, a, e) : O.sdpaFlash(qc, kc, vc, a, e);
            // Heads-major q (Phi-3 and NeoX concatenate their rotary halves): flash's output then
            // needs the transpose(1, 2).contiguous() copy; the memory-efficient kernel writes
            // (b, s, heads, d) whatever q's layout (measured, Phi-3 QLoRA's fp32 attention) when
            // q and v have one head size, and needs the copy too when MLA's v is narrower
            // (measured: sdpa_attention.py's contiguous() copies the output of every DeepSeek-V3
            // layer, Moonlight in the corpus and tests/data/h200/traced-2026-12-04
            // deepseek_v3-alt-*; 1.1% of peak at b1 x 4096 without it).
            if (headsMajor && (!efficient || a.dq != a.dv)) {
                T cont = O.copy(out);
                S.drop(out);
                out = cont;
            }
        }
        S.drop(qc);
        S.drop(kc);
        S.drop(vc);
        return out;
    }

    // The attention block's q, k and v as (b, heads, s, d) views, by how the family projects.
    struct Qkv
    {
        T q, k, v;
    };
    Qkv project(LayerParams &L, const T &hnorm)
    {
        using M = LinearModule;
        const int64_t qn = checkedMul(tok, qOut), kvn = checkedMul(tok, kvOut);
        Qkv r;
        if (!m.fusedQkv) {
            // q_proj(x).view(...).transpose(1, 2), k, then v (Qwen3: an RMSNorm over head_dim
            // first; OLMo 2/3: over the whole projection).
            auto one = [&](int mod, const T &w, const T *bias, LoraPair *lora, const T *qkn, int64_t nHeads,
                           bool copyBack) {
                T y = linear(hnorm, mod, w, bias, lora);
                if (mod == int(M::Q) && ft.attentionOutputGate) {
                    // Qwen3.5: torch.chunk(q_proj(x).view(b, s, heads, 2 d), 2, dim=-1), then
                    // gate.reshape(b, s, -1): a copy, kept until the output is gated.
                    std::vector<T> parts = O.split(y, {qn, qn});
                    S.drop(y);
                    outGate = O.copy(parts[1]);
                    S.drop(parts[1]);
                    y = parts[0];
                }
                if (qkn) {
                    const bool projection = ft.qkNorm == QkNorm::Projection;
                    T n = projection ? rmsnorm(y, *qkn, tok, nHeads * hd) : rmsnorm(y, *qkn, tok * nHeads, hd);
                    S.drop(y);
                    y = n;
                }
                T v = O.headsView(y, copyBack);
                S.drop(y);
                return v;
            };
            const bool late = ft.qkNormAfterProjections; // Gemma 3: q_norm(q), k_norm(k) after v_proj
            r.q = one(int(M::Q), L.q, &L.qb, &L.lora[0], m.qkNorm && !late ? &L.qn : nullptr, heads, true);
            r.k = one(int(M::K), L.k, &L.kb, &L.lora[1], m.qkNorm && !late ? &L.kn : nullptr, kvHeads, true);
            r.v = one(int(M::V), L.v, &L.vb, &L.lora[2], nullptr, kvHeads, false);
            if (m.qkNorm && late) {
                T qn = rmsnorm(r.q, L.qn, tok * heads, hd);
                S.drop(r.q);
                r.q = qn;
                T kn = rmsnorm(r.k, L.kn, tok * kvHeads, hd);
                S.drop(r.k);
                r.k = kn;
            }
            return r;
        }
        T qkv = linear(hnorm, int(M::Q), L.q, &L.qb, &L.lora[0]);
        if (ft.qkvLayout == FusedQkvLayout::SplitColumns) {
            // c_attn(x).split(hidden, dim=2), each .view(...).transpose(1, 2); attention's
            // gradients come back in the projection's layout, so no copies on the way back.
            auto parts = O.split(qkv, {qn, kvn, kvn});
            r.q = O.headsView(parts[0], false);
            r.k = O.headsView(parts[1], false);
            r.v = O.headsView(parts[2], false);
            for (T &p : parts)
                S.drop(p);
        } else if (ft.qkvLayout == FusedQkvLayout::IndexedKv) {
            // Falcon's multi-query _split_heads: the query heads a view (SliceBackward0), the key
            // and value heads indexed by a one-element int64 tensor each (copies; IndexBackward0
            // keeps the index), then transpose(1, 2).reshape(...), views of the same shape.
            r.q = O.slice(qkv, qn);
            T ik = S.make(8, 8);
            r.k = O.gather(qkv, ik, tok, kvOut);
            S.drop(ik);
            T iv = S.make(8, 8);
            r.v = O.gather(qkv, iv, tok, kvOut);
            S.drop(iv);
            rotLocals.push_back(S.view(qkv)); // fused_qkv: a local until the attention returns
        } else if (ft.qkvLayout == FusedQkvLayout::PerHeadChunks) {
            // query_key_value(x).view(b, s, heads, 3 d).transpose(1, 2).chunk(3, dim=-1)
            T hv = O.headsView(qkv, true);
            auto parts = O.split(hv, {qn, kvn, kvn});
            S.drop(hv);
            r.q = parts[0];
            r.k = parts[1];
            r.v = parts[2];
        } else {
            // Phi-3: qkv[..., :q], qkv[..., q:q+kv], qkv[..., q+kv:], each viewed per head.
            T q = O.slice(qkv, qn), k = O.slice(qkv, kvn), v = O.slice(qkv, kvn);
            r.q = O.headsView(q, true);
            r.k = O.headsView(k, true);
            r.v = O.headsView(v, false);
            S.drop(q);
            S.drop(k);
            S.drop(v);
        }
        S.drop(qkv);
        return r;
    }

    // Rotary embedding as the family applies it: none (GPT-2's learned positions), on all of
    // head_dim (Llama), or on its first rotary_dim features, then torch.cat with the rest (Phi-3
    // and GPT-NeoX's apply_rotary_pos_emb, which concatenate even when nothing passes through).
    T rotary(const T &x, const T &cos, const T &sin, int64_t features)
    {
        if (m.learnedPositions)
            return S.view(x);
        if (ft.rotaryHalfTables)
            return ropeHalves(x, cos, sin, features);
        if (!ft.rotaryConcat)
            return rope(x, cos, sin, features);
        const int64_t rotF = features / hd * rotaryDim(), passF = features - rotF;
        T rot = O.slice(x, checkedMul(tok, rotF));
        T pass = O.slice(x, checkedMul(tok, passF));
        T emb = rope(rot, cos, sin, rotF);
        S.drop(rot);
        T out = O.cat({&emb, &pass}, checkedMul(tok, features), emb.elem);
        S.drop(emb);
        S.drop(pass);
        return out;
    }
    int64_t rotaryDim() const { return static_cast<int64_t>(static_cast<double>(hd) * m.rotaryFraction); }

    T layerForward(LayerParams &L, const T &x, const T &cos, const T &sin)
    {
        // OLMo 2/3 normalise the branches' outputs only: attention reads the stream itself.
        T hnorm = ft.norms == NormPlacement::Post ? S.view(x) : norm(x, L.n1, L.n1b);
        S.setOp("self_attn");
        T o = m.isLinearAttentionLayer(&L - layers.data()) ? deltaNet(L, hnorm)
              : m.isMla()                                   ? mlaAttention(L, hnorm, cos, sin)
                                                            : attentionBlock(L, hnorm, cos, sin);
        T out = afterAttention(L, x, hnorm, o);
        dropAttnWeights();
        if (m.hasPerLayerInputs())
            out = perLayerInput(L, out);
        if (ft.layerScalar) { // Gemma 4: hidden_states *= self.layer_scalar (a buffer)
            S.setOp("layer_scalar");
            T scaled = O.inPlace(out, {});
            S.drop(out);
            out = scaled;
        }
        return out;
    }

    // Gemma4TextDecoderLayer's per-layer input (Note [Gemma 4]): residual + norm(projection(
    // act(gate(x)) * per_layer_input)), the input its layer's slice of the model's per-layer inputs.
    T perLayerInput(LayerParams &L, T x)
    {
        S.setOp("per_layer_input");
        const int64_t P = m.perLayerInputSize;
        T g = linear(x, -1, L.pliGate, nullptr, &L.pliLora[0]);
        T a = activationOf(g);
        S.drop(g);
        T p = O.mul(a, layerPli, checkedMul(tok, P), a.elem, true, true, 0);
        S.drop(a);
        T proj = linear(p, -1, L.pliProj, nullptr, &L.pliLora[1]);
        S.drop(p);
        T n = norm(proj, L.pliNorm, T{});
        S.drop(proj);
        S.setOp("residual");
        T out = O.add(x, n, re);
        S.drop(n);
        S.drop(x); // residual, a local of the layer's forward
        return out;
    }

    // Qwen3.5's linear-attention layers (Note [Gated DeltaNet]): the mixer is sim/deltanet.cpp's;
    // its Linears run here, as every other Linear does.
    T deltaNet(LayerParams &L, const T &hnorm)
    {
        const auto &la = m.linearAttn;
        sim::DeltaNetShape d;
        d.b = b;
        d.s = s;
        d.keyHeads = la.keyHeads;
        d.valueHeads = la.valueHeads;
        d.keyDim = la.keyDim;
        d.valueDim = la.valueDim;
        d.kernel = la.convKernel;
        d.elem = amp ? 2 : ce;
        const sim::DeltaNetWeights w{&L.laConv, &L.laDt, &L.laA, &L.laNorm};
        using P = sim::DeltaNetProjection;
        return sim::gatedDeltaNet(O, d, w, hnorm, [&](const T &x, P p) {
            const auto i = static_cast<size_t>(p);
            return linear(x, -1, *deltaNetLinears(L)[i], nullptr, &L.laLora[i]);
        });
    }

    // See Note [Returned attention weights] (docs/estimator.md): eager attention's probabilities,
    // returned by the attention module and bound to the decoder layer's `_`.
    T attnWeights;
    void dropAttnWeights()
    {
        if (attnWeights.valid()) {
            S.drop(attnWeights);
            attnWeights = T{};
        }
    }

    // DeepseekV2Attention / DeepseekV3Attention (multi-head latent attention), as the H200 streams
    // of deepseek-v2-lite and moonlight order it: q, the compressed kv and its norm, the rotary
    // parts, query = cat(q_nope, q_pe), kv_b_proj, key = cat(k_nope, k_pe expanded to every head),
    // SDPA's memory-efficient kernel (q/k and v head sizes differ), o_proj.
    T mlaAttention(LayerParams &L, const T &x, const T &cos, const T &sin)
    {
        using M = LinearModule;
        const int64_t H = heads, dn = m.qkNopeDim, dr = m.qkRopeDim, dv = m.vHeadDim, r = m.kvLoraRank;
        T q;
        if (m.qLoraRank > 0) {
            T qa = linear(x, -1, L.qa, nullptr, &L.mlaLora[0]);
            T qn = rmsnorm(qa, L.qaN, tok, m.qLoraRank);
            S.drop(qa);
            q = linear(qn, -1, L.qb2, nullptr, &L.mlaLora[1]);
            S.drop(qn);
        } else {
            q = linear(x, int(M::Q), L.q, nullptr, &L.lora[0]);
        }
        T ckv = linear(x, -1, L.kva, &L.kvaB, &L.mlaLora[2]); // kv_a_proj_with_mqa
        T kvIn = O.slice(ckv, checkedMul(tok, r));
        T kvn = rmsnorm(kvIn, L.kvaN, tok, r); // kv_a_layernorm on the split's view
        S.drop(kvIn);
        T qnope = O.slice(q, checkedMul(tok, H * dn));
        T qpe = O.slice(q, checkedMul(tok, H * dr));
        T kpe = O.slice(ckv, checkedMul(tok, dr));
        S.setOp("apply_rotary_emb");
        T qr, kr;
        if (ft.complexRotary) {
            // apply_rotary_emb: xq.float(), xk.float(), view_as_complex, * freqs_cis (saved; the
            // product has the fp32 copy's bytes), view_as_real(...).type_as(x).
            T xq = O.to(qpe, 4), xk = O.to(kpe, 4);
            T pq = O.mul(xq, cos, xq.numel(), 4, true, false, 0);
            qr = O.to(pq, qpe.elem);
            S.drop(pq);
            T pk = O.mul(xk, cos, xk.numel(), 4, true, false, 0);
            kr = O.to(pk, kpe.elem);
            S.drop(pk);
            S.drop(xq);
            S.drop(xk);
        } else {
            qr = ropeHalves(qpe, cos, sin, H * dr);
            kr = ropeHalves(kpe, cos, sin, dr);
        }
        S.setOp("self_attn");
        T query = O.cat({&qnope, &qr}, checkedMul(tok, H * (dn + dr)), q.elem);
        T kvbOut = linear(kvn, -1, L.kvb, nullptr, &L.mlaLora[3]); // kv_b_proj
        T knope = O.slice(kvbOut, checkedMul(tok, H * dn));
        T value = O.slice(kvbOut, checkedMul(tok, H * dv));
        T kexp = O.headsView(kr, true); // k_pe.expand(...): a view; its gradient is summed back
        T key = O.cat({&knope, &kexp}, checkedMul(tok, H * (dn + dr)), q.elem);
        S.drop(kexp);
        T attn;
        if (c.attention == Attention::Flash) {
            // See Note [Flash kernels]: v padded to the query's head size (F.pad), the kernel's
            // output sliced back to dv and made contiguous by the reshape (a copy).
            T vp = O.pad(value, checkedMul(tok, H * (dn + dr)) * value.elem);
            T full = attention(query, key, vp, false, false, dn + dr, dn + dr);
            T part = O.slice(full, checkedMul(tok, H * dv));
            attn = O.copy(part);
            for (T *t : {&part, &full, &vp})
                S.drop(*t);
        } else {
            attn = attention(query, key, value, true, false, dn + dr, dv);
        }
        T o = linear(attn, int(M::O), L.o, &L.ob, &L.lora[3]);
        S.drop(attn);
        for (T *t : {&query, &key, &knope, &value, &kvbOut, &qnope, &qpe, &kpe, &kvn, &q, &qr, &ckv, &kr})
            S.drop(*t);
        return o;
    }

    // Gemma4TextAttention.store_full_length_kv: the last layer of its kind keeps its keys and
    // values in shared_kv_states (for the layers that share them, when there are).
    bool storesSharedKv(int64_t l) const
    {
        const int64_t first = m.kvSharedLayers > 0 ? m.numLayers - m.kvSharedLayers : m.numLayers;
        if (l >= first)
            return false;
        for (int64_t k = l + 1; k < first; ++k)
            if (slidingLayer(k) == slidingLayer(l))
                return false;
        return true;
    }

    // Gemma4TextAttention.forward (Note [Gemma 4]): q_proj, q_norm and rotary; k_proj and v_proj
    // (or the keys' projection as the values: attention_k_eq_v), k_norm and rotary, v_norm. The
    // heads' transposes come after, as views.
    void projectGemma4(LayerParams &L, const T &hnorm, const T &cos, const T &sin, T &qe, T &ke, T &v)
    {
        using M = LinearModule;
        T q = linear(hnorm, int(M::Q), L.q, &L.qb, &L.lora[0]);
        T qn = rmsnorm(q, L.qn, tok * heads, hd);
        S.drop(q);
        T qr = rope(qn, cos, sin, qOut);
        S.drop(qn);
        qe = O.headsView(qr, false);
        S.drop(qr);
        if (!L.k.valid()) { // a key/value-sharing layer: the stored keys and values (views)
            const auto &kind = sharedKv[slidingLayer(&L - layers.data()) ? 0 : 1];
            ke = S.view(kind.at(0));
            v = S.view(kind.at(1));
            return;
        }
        T k = linear(hnorm, int(M::K), L.k, &L.kb, &L.lora[1]);
        T vp = L.v.valid() ? linear(hnorm, int(M::V), L.v, &L.vb, &L.lora[2]) : S.view(k);
        T kn = rmsnorm(k, L.kn, tok * kvHeads, hd);
        S.drop(k); // key_states rebinds (the values' view keeps it with attention_k_eq_v)
        T kr = rope(kn, cos, sin, kvOut);
        S.drop(kn);
        ke = O.headsView(kr, false);
        S.drop(kr);
        T vn = rmsnorm(vp, T{}, tok * kvHeads, hd);
        S.drop(vp);
        v = O.headsView(vn, false);
        S.drop(vn);
    }

    // The attention block of the Llama-style families: q, k, v projections, rotary, attention,
    // o_proj.
    T attentionBlock(LayerParams &L, const T &hnorm, const T &cos, const T &sin)
    {
        const int64_t li = &L - layers.data();
        if (ft.valueNorm) {
            T qe, ke, v;
            projectGemma4(L, hnorm, cos, sin, qe, ke, v);
            if (storesSharedKv(li)) {
                auto &kind = sharedKv[slidingLayer(li) ? 0 : 1];
                for (T &t : kind)
                    S.drop(t);
                kind = {S.view(ke), S.view(v)};
            }
            return attentionOutput(L, qe, ke, v, false, explicitMask(li));
        }
        Qkv p = project(L, hnorm);
        T qe, ke;
        if ((ft.noRotaryOnFullLayers && hasSlidingWindow() && !slidingLayer(li)) || (ft.noRopeLayersListed && noRope(li))) {
            qe = S.view(p.q);
            ke = S.view(p.k);
        } else if (ft.rotaryInterleaved && !ft.rotaryConcat) {
            ropeInterleaved(p.q, p.k, cos, sin, qe, ke);
        } else if (ft.rotaryConcat && ft.rotaryCatAfterPair && !m.learnedPositions) {
            // q_rot and k_rot turned by one apply_rotary_pos_emb, then each torch.cat with its
            // pass-through features.
            auto part = [&](const T &x, int64_t features, T &rot, T &pass) {
                const int64_t rotF = features / hd * rotaryDim();
                rot = O.slice(x, checkedMul(tok, rotF));
                pass = O.slice(x, checkedMul(tok, features - rotF));
                return rotF;
            };
            T qr, qp, kr, kp;
            const int64_t qRot = part(p.q, qOut, qr, qp), kRot = part(p.k, kvOut, kr, kp);
            // GLM 4: the interleaved tables (repeat_interleave of cos's and sin's first halves,
            // in their dtype) made first and kept by the products' nodes; its interleaved
            // rotate_half (a negated strided half, then a stack) allocates as rotate_half does.
            T ci, si;
            if (ft.rotaryInterleaved)
                interleavedTables(cos, sin, ci, si);
            const T &c1 = ft.rotaryInterleaved ? ci : cos, &s1 = ft.rotaryInterleaved ? si : sin;
            T qt = rope(qr, c1, s1, qRot);
            T kt = rope(kr, c1, s1, kRot);
            if (ft.rotaryInterleaved) {
                S.drop(ci);
                S.drop(si);
            }
            qe = O.cat({&qt, &qp}, checkedMul(tok, qOut), qt.elem);
            if (ft.rotaryCatRebinds)
                S.drop(qt);
            ke = O.cat({&kt, &kp}, checkedMul(tok, kvOut), kt.elem);
            if (ft.rotaryCatRebinds) {
                S.drop(kt);
                for (T *t : {&qr, &qp, &kr, &kp})
                    S.drop(*t);
            } else {
                // query_rot, query_pass, key_rot and key_pass are the forward's locals: they go when
                // it returns, and the pass-through views keep the projections' outputs until then.
                rotLocals = {qr, qp, kr, kp, qt, kt};
            }
        } else {
            qe = rotary(p.q, cos, sin, qOut);
            ke = rotary(p.k, cos, sin, kvOut);
        }
        if (ft.rotaryFp32 && qe.elem != p.q.elem) {
            // OLMo 2: `return q_embed.to(q_type), k_embed.to(k_type)` once both are computed.
            T q2 = O.to(qe, p.q.elem), k2 = O.to(ke, p.k.elem);
            S.drop(qe);
            S.drop(ke);
            qe = q2;
            ke = k2;
        }
        S.drop(p.q);
        S.drop(p.k);
        const bool catRotary = !m.learnedPositions && (ft.rotaryConcat || ft.rotaryHalfTables);
        return attentionOutput(L, qe, ke, p.v, catRotary, explicitMask(li));
    }

    // The attention over q, k and v (the block's locals, dropped here once o_proj has run), its
    // output gate (Qwen3.5) and o_proj.
    T attentionOutput(LayerParams &L, T &qe, T &ke, T &v, bool catRotary, bool masked)
    {
        if (kv.on) {
            // GRPO's prefill (Note [GRPO step]): DynamicLayer.update's torch.cat onto the empty
            // cache copies the keys and the values; key_states and value_states rebind to them
            const size_t li = static_cast<size_t>(&L - layers.data());
            S.setOp("generate.kv_cache");
            kv.keys[li] = S.make(ke.bytes, ke.elem, Category::Activations);
            kv.values[li] = S.make(v.bytes, v.elem, Category::Activations);
            S.drop(ke);
            S.drop(v);
            ke = S.view(kv.keys[li]);
            v = S.view(kv.values[li]);
        }
        T attn = attention(qe, ke, v, catRotary, masked, 0, 0, L.sinks.valid() ? &L.sinks : nullptr);
        if (outGate.valid()) { // Qwen3.5: attn_output * torch.sigmoid(gate)
            T sg = O.sigmoid(outGate);
            T gated = O.mul(attn, sg, checkedMul(tok, qOut), attn.elem, true, true, 0);
            S.drop(attn);
            S.drop(sg);
            S.drop(outGate);
            outGate = T{};
            attn = gated;
        }
        T o = linear(attn, int(LinearModule::O), L.o, &L.ob, &L.lora[3]);
        S.drop(attn);
        // The attention's locals (query_states, key_states, value_states) go when its forward
        // returns, after o_proj: it matters where nothing saves them (a checkpointed forward).
        S.drop(qe);
        S.drop(ke);
        S.drop(v);
        for (T &t : rotLocals)
            S.drop(t);
        rotLocals.clear();
        return o;
    }

    // Granite: `residual + hidden_states * self.residual_multiplier`, the branch's output rebound
    // to the product before the add.
    void scaleBranch(T &branch)
    {
        if (!ft.residualBranchScaled)
            return;
        T scaled = O.scale(branch);
        S.drop(branch);
        branch = scaled;
    }

    T afterAttention(LayerParams &L, const T &x, T &hnorm, T o)
    {
        // GPT2Block binds the attention's result to a new name, so `hidden_states` (ln_1's
        // output) lives until the residual add; elsewhere the attention's result rebinds it.
        const bool keepNorms = ft.normOutputKept;
        const bool shared = m.parallelResidual && ft.parallelSharedNorm; // the MLP reads hnorm too
        if (!keepNorms && !shared)
            S.drop(hnorm);
        {
            T od = O.dropout(o, m.residDropout); // GPT-2 resid_dropout, Phi-3 resid_attn_dropout
            S.drop(o);
            o = od;
        }
        if (shared && ft.parallelSumInPlace) {
            // Falcon: mlp_output += attention_output, then dropout_add(mlp_output, residual): one
            // new tensor; the attention's output and the normalised input go when the layer returns.
            T mo = mlp(L, hnorm);
            S.setOp("residual");
            T sum = O.addInPlace(mo, o);
            S.drop(mo);
            T x2 = O.add(x, sum, re);
            S.drop(sum);
            S.drop(o);
            S.drop(hnorm);
            return x2;
        }
        if (shared) {
            // Phi: attn_outputs + feed_forward_hidden_states + residual, the MLP over the same
            // normalised input, which lives until the layer returns.
            T mo = mlp(L, hnorm);
            T md = O.dropout(mo, m.residDropout);
            S.drop(mo);
            S.setOp("residual");
            T s1 = O.add(o, md, re);
            T x2 = O.add(s1, x, re);
            S.drop(s1);
            S.drop(md);
            S.drop(o);
            S.drop(hnorm);
            return x2;
        }
        if (m.parallelResidual) {
            // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x)), as mlp_output + attn_output + hidden_states.
            T h2 = norm(x, L.n2, L.n2b);
            T mo = mlp(L, h2);
            S.drop(h2);
            T md = O.dropout(mo, m.residDropout);
            S.drop(mo);
            S.setOp("residual");
            T s1 = O.add(md, o, re);
            S.drop(md);
            S.drop(o);
            T x2 = O.add(s1, x, re);
            S.drop(s1);
            return x2;
        }
        const bool sandwich = ft.norms != NormPlacement::Pre; // Gemma 2/3, OLMo 2/3: norms after attention and MLP
        if (sandwich) {
            T on = norm(o, L.n2, L.n2b); // post_attention_layernorm
            S.drop(o);
            o = on;
        }
        S.setOp("residual");
        scaleBranch(o);
        T x1 = O.add(x, o, re);
        // GPT2Block names the attention's output attn_output: it lives until the block returns.
        if (!keepNorms)
            S.drop(o);
        if (keepNorms)
            S.drop(hnorm);
        T h2 = ft.norms == NormPlacement::Post       ? S.view(x1)
               : ft.norms == NormPlacement::Sandwich ? norm(x1, L.n3, T{})
                                                     : norm(x1, L.n2, L.n2b);
        T mlpOut = mlp(L, h2);
        if (ft.gptOssExperts) // `hidden_states, _ = self.mlp(...)`: the router's scores rebind `_`
            dropAttnWeights();
        if (!keepNorms)
            S.drop(h2);
        if (sandwich) {
            T mn = norm(mlpOut, L.n4, T{}); // post_feedforward_layernorm
            S.drop(mlpOut);
            mlpOut = mn;
        }
        {
            T md = O.dropout(mlpOut, m.residDropout);
            S.drop(mlpOut);
            mlpOut = md;
        }
        S.setOp("residual");
        scaleBranch(mlpOut);
        T x2 = O.add(x1, mlpOut, re);
        if (keepNorms) { // GPT2Block's locals, in the order they go
            S.drop(h2);
            S.drop(o);
        }
        S.drop(mlpOut);
        S.drop(x1);
        return x2;
    }

    T mlp(LayerParams &L, const T &x)
    {
        S.setOp("mlp");
        if (m.isMoeLayer(&L - layers.data()))
            return moe(L, x);
        return denseMlp(L, x);
    }

    T denseMlp(LayerParams &L, const T &x)
    {
        const int e = amp ? 2 : ce;
        const int64_t n = checkedMul(tok, L.down.cols); // down_proj's in-features: this MLP's width
        if (m.fusedGateUp) {
            // Phi-3: gate_up_proj(x).chunk(2, dim=-1); up * act(gate); down_proj
            T gu = linear(x, int(LinearModule::Gate), L.gate, nullptr, &L.lora[4]);
            auto parts = O.split(gu, {n, n});
            S.drop(gu);
            T a = O.activation(parts[0], m.activation);
            T p = O.mul(parts[1], a, n, e);
            S.drop(a);
            S.drop(parts[0]);
            S.drop(parts[1]);
            T d = linear(p, int(LinearModule::Down), L.down, &L.downB, &L.lora[6]);
            S.drop(p);
            return d;
        }
        if (m.mlp == MlpKind::Gated) {
            T g = linear(x, int(LinearModule::Gate), L.gate, nullptr, &L.lora[4]);
            T a = O.activation(g, m.activation);
            S.drop(g);
            T u = linear(x, int(LinearModule::Up), L.up, nullptr, &L.lora[5]);
            T p = O.mul(a, u, n, e);
            S.drop(a);
            S.drop(u);
            T d = linear(p, int(LinearModule::Down), L.down, &L.downB, &L.lora[6]);
            S.drop(p);
            return d;
        }
        T u = linear(x, int(LinearModule::Up), L.up, &L.upB, &L.lora[5]);
        T a = activationOf(u);
        S.drop(u);
        T d = linear(a, int(LinearModule::Down), L.down, &L.downB, &L.lora[6]);
        S.drop(a);
        return d;
    }

    // The sparse MoE block of transformers 5 (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock):
    // the shared expert first (Qwen2-MoE), the top-k router, then grouped_mm_experts_forward
    // (integrations/moe.py), the default experts implementation on CUDA. Allocation sizes and
    // order follow the H200 streams of mixtral-8x7b-l2/-l4 and qwen1.5-moe-a2.7b.
    // Its Linears see hidden_states.view(-1, h), except DeepSeek's shared experts, which take the
    // block's 3-D input (Note [Flat Linear inputs]).
    T moe(LayerParams &L, const T &x)
    {
        S.setOp("moe");
        S.setFlatInputs(true);
        T shared;
        if (m.sharedExpertIntermediateSize > 0 && !ft.sharedExpertsAfter)
            shared = denseMlp(L, x);
        T logits, top, idx, weights;
        if (ft.fp32Router)
            deepseekRouter(L, x, logits, idx, weights);
        else if (ft.gptOssExperts)
            gptOssRouter(L, x, logits, top, idx, weights);
        else
            defaultRouter(L, x, logits, top, idx, weights);
        T out = experts(L, x, logits, top, idx, weights, shared);
        S.setFlatInputs(false);
        return out;
    }

    // DeepseekV2Moe / DeepseekV3MoE's router: F.linear(x.float(), gate.weight.float()), then
    // softmax top-k (V2) or sigmoid scores with e_score_correction_bias, group-limited top-k,
    // gathered, renormalised (V3); either way * routed_scaling_factor, left in fp32.
    void deepseekRouter(LayerParams &L, const T &x, T &logits, T &idx, T &weights)
    {
        S.setOp("router");
        const int64_t E = m.numExperts, K = m.expertsPerToken;
        T xf = O.to(x, 4);
        T wf = O.to(L.router, 4);
        logits = O.linear(xf, wf, nullptr, tok, h, E, 4);
        S.drop(xf);
        S.drop(wf);
        if (!ft.sigmoidRouter) {
            T probs = O.softmax(logits);
            auto [top, i] = O.topk(probs, tok, static_cast<int>(K));
            S.drop(probs);
            idx = i;
            weights = O.scale(top, 4);
            S.drop(top);
            return;
        }
        T scores = O.sigmoid(logits);
        T choice = S.make(scores.bytes, 4); // scores + e_score_correction_bias (no grad)
        T masked = S.make(scores.bytes, 4); // masked_fill of the groups not chosen
        auto [tv, ti] = O.topk(masked, tok, static_cast<int>(K));
        S.drop(tv);
        S.drop(masked);
        S.drop(choice);
        idx = ti;
        T picked = O.gather(scores, idx, tok, K); // scores.gather(1, topk_indices)
        T denom = S.make(tok * 4, 4);
        T norm = O.scale(picked, 4); // / (sum + 1e-20): the sum is a constant here
        S.drop(denom);
        S.drop(picked);
        weights = O.scale(norm, 4); // * routed_scaling_factor
        S.drop(norm);
        S.drop(scores);
    }

    // GptOssTopKRouter: F.linear(x, weight, bias), topk of the logits, softmax over the top k in
    // their dtype. The top-k values go when the router returns; the logits are the MLP's `_`
    // until it returns.
    void gptOssRouter(LayerParams &L, const T &x, T &logits, T &top, T &idx, T &weights)
    {
        S.setOp("router");
        logits = linear(x, -1, L.router, &L.routerB, nullptr);
        auto [tv, ti] = O.topk(logits, tok, static_cast<int>(m.expertsPerToken));
        idx = ti;
        weights = O.softmax(tv);
        S.drop(tv);
        top = S.view(weights);
    }

    // Mixtral / Qwen-MoE: F.linear -> (float) softmax -> topk -> (renormalise) -> (cast back).
    void defaultRouter(LayerParams &L, const T &x, T &logits, T &top, T &idx, T &weights)
    {
        const int e = amp ? 2 : ce;
        const int64_t E = m.numExperts, K = m.expertsPerToken;
        const bool mixtral = ft.topkAlwaysNormalized; // renormalised, and left in fp32
        S.setOp("router");
        T wr = weightFor(L.router);
        T xin = amp ? O.to(x, 2) : S.view(x);
        logits = O.linear(xin, wr, nullptr, tok, h, E, e);
        S.drop(xin);
        S.drop(wr);
        T lf = O.to(logits, 4);
        T probs = O.softmax(lf);
        S.drop(lf);
        std::tie(top, idx) = O.topk(probs, tok, static_cast<int>(K));
        S.drop(probs);
        bool norm = mixtral || ft.topkRenormalized;
        if (!norm && hc.is_object() && hc.contains("norm_topk_prob") && hc.at("norm_topk_prob").is_boolean())
            norm = hc.at("norm_topk_prob").get<bool>();
        weights = S.view(top);
        if (norm) {
            // router_top_value /= router_top_value.sum(-1, keepdim=True): the in-place division
            // saves a clone of the values it overwrites, and the sum.
            T sum = S.make(tok * 4, 4);
            T clone = S.make(top.bytes, 4);
            T div = O.inPlace(top, {clone.sto, sum.sto});
            S.drop(clone);
            S.drop(sum);
            S.drop(weights);
            weights = div;
        }
        if (!mixtral) {
            T cast = O.to(weights, e); // router_top_value.to(router_logits.dtype)
            S.drop(weights);
            weights = cast;
        }
    }

    // PEFT 0.21's ParamWrapper over a stacked experts Parameter (lora/layer.py, get_delta_factors
    // and the LoRA parametrization), as the H200 streams of Qwen3-30B-A3B, Moonlight and
    // DeepSeek-V2-Lite show it op by op: the factors are lora_B.reshape(out, r, E).permute(2, 0, 1)
    // and lora_A.reshape(E, r, in), each cast to the experts' dtype (lhs, then rhs; autograd keeps
    // both), and register_parametrization evaluates the parametrized weight once and drops it.
    struct Wrapped
    {
        T lhs, rhs;
        T weight; // W + delta, cached by parametrize.cached() until the wrappers exit
    };
    // See Note [Experts ParamWrapper] (docs/estimator.md).
    Wrapped activateWrapper(const T &w, LoraPair &p)
    {
        S.setOp("lora.get_delta_factors");
        Wrapped r;
        T bv = O.headsView(p.b, true); // the permuted view: its gradient is copied back on reshape
        r.lhs = O.to(bv, w.elem);
        S.drop(bv);
        T av = O.viewOf(p.a);
        r.rhs = O.to(av, w.elem);
        S.drop(av);
        S.setOp("lora.register_parametrization");
        T check = O.loraExpertWeight(w, r.lhs, r.rhs, false);
        S.drop(check);
        return r;
    }
    // The experts' weight as grouped_mm reads it through the parametrization: W + delta, made at
    // each access (the forward's), saved by grouped_mm for the backward.
    T wrappedWeight(const T &w, const Wrapped &f)
    {
        S.setOp("lora.parametrization");
        T out = O.loraExpertWeight(w, f.lhs, f.rhs, true);
        S.setOp("experts");
        return out;
    }

    T experts(LayerParams &L, const T &x, T &logits, T &top, T &idx, T &weights, T &shared)
    {
        const int e = amp ? 2 : ce;
        const int64_t E = m.numExperts, K = m.expertsPerToken, Ie = m.expertIntermediateSize;
        const int64_t pairs = checkedMul(tok, K);
        // PEFT's ParamWrappers around the experts module: the outer (down_proj) activates first,
        // then the inner (gate_up_proj); each holds its factors until the experts return.
        Wrapped wDown, wGateUp;
        if (L.downLora.on)
            wDown = activateWrapper(L.expDown, L.downLora);
        if (L.gateUpLora.on)
            wGateUp = activateWrapper(L.gateUp, L.gateUpLora);
        // grouped_mm_experts_forward
        S.setOp("experts");
        T sortedIds = S.make(pairs * 8, 8); // torch.sort: values, permutation, scratch
        T perm = S.make(pairs * 8, 8);
        T scratch = S.make(pairs * 8, 8);
        S.drop(scratch);
        T rowIdx = S.make(pairs * 8, 8); // perm // num_top_k
        T sel = O.gather(x, rowIdx, pairs, h);
        T sw = O.gather(weights, perm, pairs, 1);
        T idsInt = S.make(pairs * 4, 4);       // expert_ids_g.int()
        T hist = S.make(E * 4, 4);             // histc
        T offsets = S.make(E * 4, 4);          // cumsum
        T cumScratch = S.make(1023, 1);
        S.drop(cumScratch);
        T mask = S.make(pairs, 1);              // sentinel mask
        T selm = O.inPlace(sel, {mask.sto});
        S.drop(sel);
        T selIn = amp ? O.to(selm, pe) : S.view(selm);
        if (L.gateUpLora.on)
            wGateUp.weight = wrappedWeight(L.gateUp, wGateUp);
        // See Note [GPT-OSS experts] (docs/estimator.md): each row's expert bias, gathered before
        // the product and added to it in place; the local lives until the down bias rebinds it.
        T bias = L.gateUpB.valid() ? O.gather(L.gateUpB, sortedIds, pairs, 2 * Ie) : T{};
        T up = O.groupedMm(selIn, L.gateUpLora.on ? wGateUp.weight : L.gateUp, offsets, pairs, h, 2 * Ie);
        S.drop(selIn);
        if (bias.valid()) {
            T added = O.addInPlace(up, bias);
            S.drop(up);
            up = added;
        }
        T upm = O.maskedFill(up, mask);
        S.drop(up);
        T p = ft.gptOssExperts ? clampedGlu(upm, checkedMul(pairs, Ie)) : gatedActivation(upm, checkedMul(pairs, Ie));
        S.drop(upm);
        if (L.downLora.on)
            wDown.weight = wrappedWeight(L.expDown, wDown);
        if (bias.valid()) { // selected_biases rebinds: the down bias is gathered first
            T downBias = O.gather(L.expDownB, sortedIds, pairs, h);
            S.drop(bias);
            bias = downBias;
        }
        T down = O.groupedMm(p, L.downLora.on ? wDown.weight : L.expDown, offsets, pairs, Ie, h);
        S.drop(p);
        if (bias.valid()) {
            T added = O.addInPlace(down, bias);
            S.drop(down);
            down = added;
        }
        T dm = O.maskedFill(down, mask);
        S.drop(down);
        const int we = std::max(dm.elem, sw.elem);
        // sw is one weight per row: its gradient sums each row (an inner reduction, no partial-sum
        // buffer: Note [Outer-dimension reduction buffer] is for per-column operands).
        T wo = O.mul(dm, sw, checkedMul(pairs, h), we, true, false, 0);
        T inv = S.make(pairs * 8, 8); // inv_perm = empty_like(perm); inv_perm[perm] = arange
        T ar = S.make(pairs * 8, 8);
        S.drop(ar);
        T wg = O.gather(wo, inv, pairs, h);
        S.drop(wo);
        T sum = O.sumGroups(wg, checkedMul(tok, h));
        T out = O.to(sum, x.elem);
        // The function's locals selected_biases, proj_out and weighted_out go when it returns
        // (what matters where nothing saved them: a checkpointed forward).
        for (T *t : {&bias, &dm, &wg})
            if (t->valid())
                S.drop(*t);
        for (T *t : {&sortedIds, &idsInt, &hist, &sum, &logits, &top, &weights, &perm, &rowIdx, &offsets, &mask,
                     &inv, &sw, &selm, &idx})
            if (!ft.sharedExpertsAfter || (t != &logits && t != &weights))
                S.drop(*t);
        // The wrappers' contexts exit, the inner first: its factors go, then parametrize's cache
        // (both W + delta: in a checkpointed forward nothing saved them), then the outer's factors
        // (H200 stream, q3moe with checkpointing). Autograd keeps what it saved.
        for (T *f : {&wGateUp.lhs, &wGateUp.rhs, &wGateUp.weight, &wDown.weight, &wDown.lhs, &wDown.rhs})
            if (f->valid())
                S.drop(*f);
        if (ft.sharedExpertsAfter) {
            // DeepSeek: hidden_states + self.shared_experts(residuals); the router's logits and
            // weights go when the MoE block returns.
            if (m.sharedExpertIntermediateSize > 0) {
                S.setFlatInputs(false); // self.shared_experts(residuals): the 3-D input
                T sh = denseMlp(L, x);
                S.setOp("moe");
                T sumOut = O.add(out, sh, x.elem);
                S.drop(sh);
                S.drop(out);
                out = sumOut;
            }
            S.drop(logits);
            S.drop(weights);
        } else if (m.sharedExpertIntermediateSize > 0) {
            S.setOp("shared_expert_gate");
            T sg = linear(x, 0, L.sharedGate, nullptr, &L.sharedGateLora); // nn.Linear(hidden, 1): Linear4bit under QLoRA
            T sig = O.sigmoid(sg);
            S.drop(sg);
            T gated = O.mul(sig, shared, checkedMul(tok, h), e, false, true, 0); // one gate per row: inner
            S.drop(sig);
            S.drop(shared);
            T sumOut = O.add(out, gated, e);
            S.drop(gated);
            S.drop(out);
            out = sumOut;
        }
        return out;
    }

    // The experts' default gating: gate, up = x.chunk(2, dim=-1); act_fn(gate) * up.
    T gatedActivation(const T &x, int64_t n)
    {
        auto gu = O.split(x, {n, n});
        T &g = gu[0], &u = gu[1];
        T a = O.activation(g, m.activation);
        T p = O.mul(a, u, n, x.elem);
        S.drop(a);
        S.drop(g);
        S.drop(u);
        return p;
    }

    // GptOssExperts._apply_gate over the interleaved columns (x[..., ::2], x[..., 1::2]: strided
    // views): gate.clamp(max=limit), up.clamp(-limit, limit), glu = gate * sigmoid(gate * alpha),
    // (up + 1) * glu. The clamps keep the views (so x itself) for their backward; the clamped up
    // goes when the function returns.
    T clampedGlu(const T &x, int64_t n)
    {
        S.setOp("experts._apply_gate");
        T gv = O.slice(x, n), uv = O.slice(x, n);
        T gate = O.clamp(gv);
        T up = O.clamp(uv);
        S.drop(gv);
        S.drop(uv);
        T ga = O.scale(gate);
        T sg = O.sigmoid(ga);
        S.drop(ga);
        T glu = O.mul(gate, sg, n, x.elem);
        S.drop(sg);
        T up1 = O.addScalar(up);
        T out = O.mul(up1, glu, n, x.elem);
        for (T *t : {&up1, &glu, &gate, &up})
            S.drop(*t);
        S.setOp("experts");
        return out;
    }

    T activationOf(const T &x)
    {
        if (m.activation == "relu2") {
            // ReLUSquaredActivation: torch.square(relu(x)). ReluBackward0 keeps its result, and
            // square is pow(x, 2), which keeps that result too (and runs in fp32 under autocast).
            T r = O.relu(x);
            T rp = amp ? O.to(r, 4) : S.view(r);
            T out = O.pow2(rp, amp ? 4 : 0);
            S.drop(rp);
            S.drop(r);
            return out;
        }
        if (m.activationSavedTensors <= 1)
            return O.activation(x, m.activation);
        // gelu_new (NewGELUActivation): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))),
        // left to right: 0.5 * x first. Autocast runs pow in fp32 (its fp32 op list), and the
        // rest of the bracket follows by type promotion.
        const int64_t n = x.numel();
        const int fe = amp ? 4 : x.elem;
        T half = O.scale(x);
        // Autocast casts pow's input to fp32 first; pow saves that copy, not x.
        T xp = O.to(x, fe);
        T x3 = O.pow2(xp, fe);
        S.drop(xp);
        T k = O.scale(x3);
        S.drop(x3);
        T inner = O.add(x, k, fe);
        S.drop(k);
        T sc = O.scale(inner);
        S.drop(inner);
        T th = O.tanh(sc);
        S.drop(sc);
        T one = O.addScalar(th);
        S.drop(th);
        T out = O.mul(half, one, n, std::max(x.elem, fe));
        S.drop(half);
        S.drop(one);
        return out;
    }

    T eagerMask, eagerMaskSliding;
    T cosLocal, sinLocal;
    T layerOutputs; // the last decoder layer's output where a deepstack clone replaced it

    // The rotary embedding's forward: position_ids.float(), inv_freq @ positions (fp32, the
    // forward's first matmul), cat, cos and sin (each * attention_scaling), cast to x's dtype.
    void rotaryTables(const T &x, T &cos, T &sin)
    {
        if (ft.multimodalRotaryTables)
            return multimodalRotaryTables(x, cos, sin);
        S.setOp("rotary_emb");
        T inv = S.make(s * 4, 4); // position_ids[:, None, :].float()
        S.blasWorkspace(0);
        // The tables cover the rotated features only; GPT-OSS's are freqs itself, half as wide.
        const int64_t rd = ft.rotaryHalfTables ? rotaryDim() / 2 : rotaryDim();
        T freqs = S.make(s * rotaryDim() / 2 * 4, 4);
        T emb = ft.rotaryHalfTables ? S.view(freqs) : S.make(s * rd * 4, 4);
        T c32 = S.make(s * rd * 4, 4);
        T c2 = S.make(s * rd * 4, 4);
        S.drop(c32);
        T s32 = S.make(s * rd * 4, 4);
        T s2 = S.make(s * rd * 4, 4);
        S.drop(s32);
        // OLMo 2's rotary returns cos and sin without the cast to x's dtype.
        const bool fp32 = x.elem == 4 || ft.rotaryFp32;
        cos = fp32 ? S.view(c2) : S.make(s * rd * x.elem, x.elem);
        sin = fp32 ? S.view(s2) : S.make(s * rd * x.elem, x.elem);
        S.drop(inv);
        S.drop(freqs);
        S.drop(emb);
        S.drop(c2);
        S.drop(s2);
    }

    // Qwen3_5TextRotaryEmbedding: position ids for text, height and width (3, b, s) as floats, the
    // frequencies (3, b, s, rd / 2), cos and sin times attention_scaling, each recomposed per
    // mrope_section into (b, s, rd) by a cat (sin first), then cast to x's dtype.
    void multimodalRotaryTables(const T &x, T &cos, T &sin)
    {
        S.setOp("rotary_emb");
        const int64_t rd = rotaryDim(), bs = checkedMul(b, s);
        T pos = S.make(checkedMul(3, bs) * 4, 4);
        T freqs = S.make(checkedMul(3, bs) * (rd / 2) * 4, 4);
        S.blasWorkspace(0); // cuBLAS's workspace, at the model's first matmul, after its output
        T c0 = S.make(freqs.bytes, 4);
        T c1 = S.make(freqs.bytes, 4);
        S.drop(c0);
        T s0 = S.make(freqs.bytes, 4);
        T s1 = S.make(freqs.bytes, 4);
        S.drop(s0);
        // Qwen2.5-VL recomposes each at half the width first (the sections' cat), then cat((f, f))
        const auto recompose = [&](T &f) {
            T half = ft.multimodalRotaryHalves ? S.make(bs * (rd / 2) * 4, 4) : T{};
            T full = S.make(bs * rd * 4, 4);
            if (half.valid())
                S.drop(half);
            S.drop(f);
            return full;
        };
        T sr = recompose(s1);
        T cr = recompose(c1);
        const bool fp32 = x.elem == 4;
        cos = fp32 ? S.view(cr) : S.make(bs * rd * x.elem, x.elem);
        sin = fp32 ? S.view(sr) : S.make(bs * rd * x.elem, x.elem);
        S.drop(pos);
        S.drop(freqs);
        S.drop(cr);
        S.drop(sr);
    }

    // One decoder layer's forward, inside checkpoint() where the layer is checkpointed.
    T decoderLayer(int64_t l, const T &hcur, const T &cos, const T &sin, const T &sdpaMask)
    {
        LayerParams &L = layers[static_cast<size_t>(l)];
        useGeometry(l);
        // Gemma 4: per_layer_inputs[:, :, l, :], a view the layer is handed.
        T pli = pliInputs.valid() ? S.view(pliInputs, checkedMul(tok, m.perLayerInputSize) * pliInputs.elem) : T{};
        layerPli = pli;
        T next;
        if (c.checkpointed(l) && !checkpointingOff) {
            const T in = hcur;
            // checkpoint() keeps the layer's tensor arguments for the recomputation: the
            // hidden states, the rotary cos/sin, the attention mask and Gemma 4's per-layer input.
            std::vector<const T *> regionInputs = {&hcur, &cos, &sin};
            if (pli.valid())
                regionInputs.push_back(&pli);
            if (eagerMask.valid()) // the layer's kind's mask
                regionInputs.push_back(eagerMaskSliding.valid() && slidesAt(l) ? &eagerMaskSliding : &eagerMask);
            else if (blockMasks[0].valid())
                regionInputs.push_back(&layerMask(l, sdpaMask));
            else if (sdpaMask.valid() && (slidingMask(l) || ft.sdpaExplicitMask))
                regionInputs.push_back(&sdpaMask);
            S.beginRegion([this, &L, l, in, cos, sin, pli]() mutable {
                useGeometry(l);
                layerPli = pli;
                // The recomputation runs in its own torch.autocast context (checkpoint.py's
                // device_autocast_ctx); leaving it clears autocast's cast cache, also when
                // the early stop unwinds it.
                struct CacheScope
                {
                    Run *run;
                    ~CacheScope() { run->clearAmpCache(); }
                } scope{this};
                T o = layerForward(L, in, cos, sin);
                S.drop(o);
            }, regionInputs);
            if (firstCheckpointRegion < 0)
                firstCheckpointRegion = S.currentRegion();
            next = layerForward(L, hcur, cos, sin);
            S.endRegion();
        } else {
            next = layerForward(L, hcur, cos, sin);
        }
        if (pli.valid())
            S.drop(pli);
        return next;
    }

    T forward(const T &ids)
    {
        if (grpo)
            return grpoStep(ids);
        if (reward)
            return rewardStep(hidden(ids));
        if (kto)
            return ktoStep(ids);
        if (orpo) {
            // concatenated_inputs: the halves' ids, masks and labels concatenated (torch.cat),
            // until concatenated_forward returns
            S.setOp("orpo.concatenated_inputs");
            std::vector<T> concatenated;
            for (int k = 0; k < 3; ++k)
                concatenated.push_back(S.make(checkedMul(tok, 8), 8, Category::Temporaries));
            T loss = orpoStep(ids);
            for (T &t : concatenated)
                S.drop(t);
            return loss;
        }
        if (!dpo)
            return headAndLoss(hidden(ids));
        // the engine's batch for TRL: input_ids, torch.ones_like(ids) as the attention mask and
        // the completion mask, until the loss returns
        S.setOp("attention_mask");
        T attentionMask = S.make(checkedMul(tok, 8), 8);
        T loss = dpoStep(ids);
        S.drop(attentionMask);
        return loss;
    }

    // The position ids the decoder reads (kept to the end of forward): cache_position and
    // position_ids (int64, one row); a vision-language model's get_rope_index gives (3, b, s) int64
    // positions instead (its per-sample bookkeeping, a few KB, left out) and the rope deltas the
    // module keeps from one forward to the next; without pixels its text model's arange.
    T positionIds()
    {
        S.setOp("positions");
        const bool rope3 = visionSim && m.vision.tokens == ModelArch::VisionSide::Tokens::Dynamic;
        if (rope3 && c.vision.any()) {
            T posIds = S.make(checkedMul(3, tok) * 8, 8);
            T deltas = S.make(b * 8, 8);
            if (ropeDeltas.valid())
                S.drop(ropeDeltas);
            ropeDeltas = deltas;
            return posIds;
        }
        if (rope3) // no pixels: the text model's arange, expanded to the three rows (a view)
            return S.make(s * 8, 8);
        T cachePos = S.make(s * 8, 8);
        T posIds = S.make(s * 8, 8);
        S.drop(cachePos);
        return posIds;
    }

    // The causal-mask helpers before the decoder layers: SDPA's explicit boolean mask (returned;
    // Falcon's, or a sliding window's), eager attention's additive masks (members).
    T causalMasks()
    {
        T sdpaMask;
        if (c.attention == Attention::SDPA && ft.sdpaExplicitMask) {
            // masking_utils.sdpa_mask materialised: a boolean (1, 1, s, s) causal mask.
            S.setOp("causal_mask");
            sdpaMask = S.make(checkedMul(s, s), 1);
        } else if (c.attention == Attention::SDPA && slidingMask(0) && !blockMasks[0].valid()) {
            // masking_utils.sdpa_mask: a boolean (1, 1, s, s) sliding-window causal mask, made
            // through two temporaries of its size.
            S.setOp("sliding_window_mask");
            T t1 = S.make(checkedMul(s, s), 1);
            T t2 = S.make(checkedMul(s, s), 1);
            S.drop(t1);
            T t3 = S.make(checkedMul(s, s), 1);
            sdpaMask = S.make(checkedMul(s, s), 1);
            S.drop(t3);
            S.drop(t2);
        }
        if (c.attention == Attention::Eager) {
            S.setOp("causal_mask");
            eagerMask = S.make(checkedMul(checkedMul(b, s), s) * (amp ? 4 : ce), amp ? 4 : ce);
            if (mixedLayerKinds())
                eagerMaskSliding = S.make(eagerMask.bytes, eagerMask.elem);
        }
        return sdpaMask;
    }

    // The model's forward up to the final norm's output.
    T hidden(const T &ids)
    {
        S.setLayer(-1);
        par->rootForward();
        S.setOp("embedding");
        T x = O.embedding(embed, ids, tok, V, h);
        // Note [Input require grads]: PEFT's LoRA on a model with gradient checkpointing on makes
        // the input embedding module's output require grad (enable_input_require_grads's hook);
        // Gemma's module scales inside, Granite's model multiplies after it.
        if (inputRequiresGrad && !ft.scaledEmbedding)
            x = S.inputLeaf(x);
        if (ft.scaledEmbedding) {
            // GemmaTextScaledWordEmbedding: embedding * embed_scale (a 0-dim buffer cast to the
            // weight's dtype): MulBackward0 keeps only the scalar.
            // Gemma 3 keeps the scale in a buffer already in the weight's dtype (no allocation).
            T scale = ft.embedScaleBuffer ? T{} : S.make(x.elem, x.elem);
            T xs = O.mul(x, scale, x.numel(), x.elem, true, false, 0);
            if (scale.valid())
                S.drop(scale);
            S.drop(x);
            x = inputRequiresGrad ? S.inputLeaf(xs) : xs; // the same tensor, now a leaf
        } else if (ft.embeddingTimesScalar) {
            // Granite: `inputs_embeds = inputs_embeds * self.embedding_multiplier` rebinds the name,
            // so the embedding's output goes at once.
            T xs = O.scale(x);
            S.drop(x);
            x = xs;
        }
        if (visionSim)
            x = visionInputs(x);
        if (m.hasPerLayerInputs())
            perLayerInputs(ids, x);
        T pos;
        if (m.learnedPositions) {
            // GPT-2: wpe(position_ids) has one row per position (position_ids is (1, s)),
            // broadcast over the batch by the add; then the embedding dropout.
            T pid = S.make(s * 8, 8);
            T pe2 = O.embedding(positions, pid, s, m.maxPositions, h);
            S.drop(pid);
            T x2 = O.add(x, pe2, x.elem);
            // GPT2Model.forward's locals inputs_embeds and position_embeds hold both until it
            // returns, after the final norm (measured: freed just before the lm_head).
            embedLocals = {x, pe2};
            x = x2;
            T xd = O.dropout(x, m.embdDropout);
            S.drop(x);
            x = xd;
        }
        // the positions, then the causal-mask helpers
        T posIds = positionIds();
        T sdpaMask = causalMasks();
        // Rotary cos and sin (fp32 math, cast to the hidden dtype), shared by every layer.
        // Gemma 4's global layers have their own head size, and so their own table's width.
        T cosGlobal, sinGlobal;
        if (!m.learnedPositions) {
            useGeometry(m.globalLayers.empty() ? -1 : m.numLayers - 1);
            rotaryTables(x, cosGlobal, sinGlobal);
            useGeometry(-1);
            if (ft.localRotary) // Gemma 3: rotary_emb_local for the sliding layers, made second
                rotaryTables(x, cosLocal, sinLocal);
        }
        // LlamaModel.forward: `hidden_states = inputs_embeds`, a second name for the embedding
        // that lives until forward returns. GPT2Model's hidden_states is the dropout's output,
        // bound to nothing else: the first block's result frees it.
        T hcur = S.view(x);
        if (m.learnedPositions)
            S.drop(x);
        else if (m.embdDropout > 0.0) {
            // StarCoder2: nn.functional.dropout(inputs_embeds, p=embedding_dropout); the
            // embedding itself stays bound to inputs_embeds until forward returns.
            T xd = O.dropout(hcur, m.embdDropout);
            S.drop(hcur);
            hcur = xd;
        }
        for (int64_t l = 0; l < m.numLayers; ++l) {
            S.setLayer(static_cast<int>(l));
            // Gemma 3's sliding layers turn q and k by the local table.
            const bool local = cosLocal.valid() && slidingLayer(l);
            const T &cos = local ? cosLocal : cosGlobal, &sin = local ? sinLocal : sinGlobal;
            const size_t unit = static_cast<size_t>(l) + 1;
            par->layerInput(unit, hcur);
            T next = decoderLayer(l, hcur, cos, sin, sdpaMask);
            par->layerOutput(unit, next);
            // Qwen3-VL: `layer_outputs` holds a layer's own output until the next layer returns
            // where the deepstack rebinds hidden_states to its clone
            if (layerOutputs.valid())
                S.drop(layerOutputs);
            S.drop(hcur);
            hcur = next;
            if (!deepstackFeatures.empty() && static_cast<size_t>(l) < deepstackFeatures[0].size()) {
                layerOutputs = next;
                hcur = sim::deepstackAdd(S, next, deepstackMasks[0], deepstackFeatures[0][static_cast<size_t>(l)]);
            } else
                layerOutputs = T{};
        }
        S.setLayer(-1);
        T fn = norm(hcur, finalNorm, finalNormB);
        if (layerOutputs.valid())
            S.drop(layerOutputs);
        layerOutputs = T{};
        deepstackMasks.clear();
        deepstackFeatures.clear();
        S.drop(hcur);
        S.drop(posIds);
        for (T *t : {&cosGlobal, &sinGlobal, &cosLocal, &sinLocal})
            if (t->valid()) {
                S.drop(*t);
                *t = T{};
            }
        if (eagerMask.valid())
            S.drop(eagerMask);
        if (eagerMaskSliding.valid())
            S.drop(eagerMaskSliding);
        if (sdpaMask.valid())
            S.drop(sdpaMask);
        for (T &t : blockMasks)
            if (t.valid()) {
                S.drop(t);
                t = T{};
            }
        if (firstCheckpointRegion >= 0) // the checkpoint frames hold the dict
            S.onRegionRelease(firstCheckpointRegion, [this]() { dropSharedKv(); });
        else
            dropSharedKv();
        firstCheckpointRegion = -1;
        if (!m.learnedPositions)
            S.drop(x);
        for (T &t : embedLocals)
            S.drop(t);
        embedLocals.clear();
        if (pliInputs.valid()) {
            S.drop(pliInputs);
            pliInputs = T{};
        }
        return fn;
    }

    // Issue 30 (Note [Vision step]): the tower's and projector's parameters, frozen, before the
    // language model's (the composite model builds its vision side first).
    void buildTower()
    {
        const sim::PartScope vision(S, ModelPart::Vision); // Note [Vision share]
        towerWeights = sim::towerWeights(S, m.vision, h, buildElem(), c.vision.trainTower && full,
                                         c.vision.trainProjector && full);
    }

    // Qwen2_5_VLModel.forward before its language model: each call of the frozen tower (images,
    // then video), its features scattered into the embeddings `x` (consumed; the scattered
    // embeddings returned). The features and the placeholder masks stay bound until forward returns.
    T visionInputs(T x)
    {
        S.setLayer(-1);
        const sim::TowerMode mode = towerMode();
        using Kind = ModelArch::VisionSide::Tower::Kind;
        if (const Kind kind = m.vision.tower.kind; kind == Kind::Siglip || kind == Kind::Clip) {
            // Gemma3Model.forward and LlavaModel.forward: image_features and special_image_mask
            // stay bound to the end; Gemma 3's masks follow
            if (c.vision.images <= 0)
                return x;
            const int64_t images = checkedMul(c.vision.images, b);
            {
                const sim::PartScope vision(S, ModelPart::Vision); // Note [Vision share]
                outputLocals.push_back(kind == Kind::Siglip
                                           ? sim::siglipFeatures(S, m.vision, towerWeights, mode, images, h, pe)
                                           : sim::clipFeatures(S, m.vision, towerWeights, mode, images, h, pe));
            }
            T mask = sim::placeholderMasks(S, tok, 1)[0];
            embedLocals.push_back(mask);
            T scattered = sim::maskedScatter(S, x, mask, &outputLocals.back());
            S.drop(x);
            if (kind == Kind::Siglip)
                blockMasks = sim::blockCausalMasks(S, b, s);
            return scattered;
        }
        const std::array<std::pair<int64_t, std::array<int64_t, 3>>, 2> calls{
            {{c.vision.images, vt.imageGrid}, {c.vision.videos, vt.videoGrid}}};
        T otherMask; // get_placeholder_mask's unused half, rebound by the next call
        for (size_t k = 0; k < calls.size(); ++k) {
            if (calls[k].first <= 0)
                continue;
            const sim::TowerCall call{calls[k].second, checkedMul(calls[k].first, b)};
            T features;
            std::optional<sim::PartScope> vision(std::in_place, S, ModelPart::Vision); // Note [Vision share]
            if (m.vision.tower.kind == ModelArch::VisionSide::Tower::Kind::Qwen3) {
                sim::TowerOutput o = mode.towerTrained || mode.projectorTrained
                                         ? sim::qwen3TowerGraph(S, m.vision, towerWeights, call, pe)
                                         : sim::qwen3Tower(S, m.vision, call, pe);
                for (T &t : o.locals)
                    embedLocals.push_back(t);
                features = o.features;
                deepstackMasks.push_back(T{});
                deepstackFeatures.push_back(o.deepstack);
            } else if (mode.hooked || mode.towerTrained || mode.projectorTrained || towerLora.any())
                features = sim::qwen25TowerGraph(S, m.vision, towerWeights, call, pe, mode, &towerLora);
            else
                features = sim::qwen25Tower(S, m.vision, call, pe);
            vision.reset();
            embedLocals.push_back(features);
            std::vector<T> masks = sim::placeholderMasks(S, tok, 2);
            if (otherMask.valid())
                S.drop(otherMask);
            otherMask = masks[1 - k];
            embedLocals.push_back(masks[k]);
            if (!deepstackMasks.empty())
                deepstackMasks.back() = masks[k];
            T scattered = sim::maskedScatter(S, x, masks[k], &features);
            S.drop(x); // inputs_embeds rebinds
            x = scattered;
        }
        if (otherMask.valid())
            embedLocals.push_back(otherMask);
        deepstackInputs();
        return x;
    }

    // Qwen3VLModel.forward's visual_pos_masks and deepstack_visual_embeds: one call's mask and
    // features as they are; with images and video, the masks' union and, a deepstack block at a
    // time, new_zeros of all visual rows with each call's features written in.
    void deepstackInputs()
    {
        if (deepstackFeatures.size() == 2) {
            S.setOp("deepstack");
            T joint = S.make(tok, 1);
            std::vector<T> embeds;
            for (size_t d = 0; d < deepstackFeatures[0].size(); ++d)
                embeds.push_back(S.make(deepstackFeatures[0][d].bytes + deepstackFeatures[1][d].bytes, pe));
            for (auto &list : deepstackFeatures)
                for (T &t : list)
                    embedLocals.push_back(t);
            deepstackFeatures = {embeds};
            deepstackMasks = {joint};
            embedLocals.push_back(joint);
        } else
            for (auto &list : deepstackFeatures)
                for (T &t : list)
                    embedLocals.push_back(t);
    }

    // Gemma4TextModel's per-layer inputs (Note [Gemma 4]): get_per_layer_inputs (the scaled
    // embedding of the ids in the packed table), then project_per_layer_inputs (the embeddings
    // through per_layer_model_projection, times a scalar, per_layer_projection_norm over each
    // layer's slice, plus the first, times 2^-0.5). Every layer reads its slice of the result.
    void perLayerInputs(const T &ids, const T &x)
    {
        S.setOp("per_layer_inputs");
        const int64_t LP = checkedMul(m.numLayers, m.perLayerInputSize);
        T e = O.embedding(pliEmbed, ids, tok, m.perLayerVocab, LP);
        T es = O.mul(e, T{}, e.numel(), e.elem, true, false, 0); // * embed_scale (a buffer)
        S.drop(e);
        T proj = linear(x, -1, pliModelProj, nullptr, &pliModelLora);
        T ps = O.scale(proj);
        S.drop(proj);
        T pn = rmsnorm(ps, pliProjNorm, checkedMul(tok, m.numLayers), m.perLayerInputSize);
        S.drop(ps);
        S.setOp("per_layer_inputs");
        T sum = O.add(pn, es);
        pliInputs = O.scale(sum);
        S.drop(sum);
        S.drop(pn);
        S.drop(es);
    }

    // The lm_head over the final norm's output `fn` (kept): the logits, as the CausalLM's forward
    // returns them.
    T lmHeadLogits(const T &fn)
    {
        S.setOp("lm_head");
        T bc; // autocast casts the bias first, as in linear()
        if (lmHeadB.valid())
            bc = amp ? weightFor(lmHeadB) : S.view(lmHeadB);
        T w = weightFor(lmHead); // then the weight, then the input (Note [Autocast cast cache])
        T xin = amp ? O.to(fn, 2) : S.view(fn);
        T logits = O.linear(xin, w, bc.valid() ? &bc : nullptr, tok, h, V, amp ? 2 : ce);
        S.drop(xin);
        S.drop(w);
        if (bc.valid())
            S.drop(bc);
        if (m.finalLogitSoftcap > 0) {
            // Gemma 2: logits / cap, tanh, * cap
            T d = O.scale(logits);
            S.drop(logits);
            T th = O.tanh(d);
            S.drop(d);
            logits = O.scale(th);
            S.drop(th);
        }
        if (ft.logitsScaledByScalar) {
            // Granite: `logits = logits / self.config.logits_scaling` (DivBackward1 saves nothing).
            T d = O.scale(logits);
            S.drop(logits);
            logits = d;
        }
        return logits;
    }

    // Issue 29: which forward a post-training loss asks for: the policy's own (with grad), the
    // policy's under no_grad (KTO's KL batch: it saves nothing, so checkpointing changes
    // nothing), or the reference's (TRL's no_grad and disable_gradient_checkpointing; the adapter
    // disabled, or the frozen copy, whose shapes are the policy's).
    enum class Pass { Policy, PolicyNoGrad, Reference };

    // ------------------------------------------------------------------ GRPO (See Note [GRPO step])
    // A pass at other shapes than the step's (GRPO's generation): b sequences of s tokens, the
    // step's shapes back when the scope ends.
    struct ShapeScope
    {
        Run &r;
        int64_t b, s, tok;
        ShapeScope(Run &run, int64_t nb, int64_t ns) : r(run), b(run.b), s(run.s), tok(run.tok)
        {
            r.b = nb;
            r.s = ns;
            r.tok = checkedMul(nb, ns);
        }
        ~ShapeScope()
        {
            r.b = b;
            r.s = s;
            r.tok = tok;
        }
    };

    // The step's rollout, before its micro-batches: generation, then the reference's
    // log-probabilities where beta > 0; the previous step's tensors go when these replace them
    // (the engine's `batches` rebinds once the rollout returns).
    void rollout(int step)
    {
        S.setPhase(step, Phase::Generation, 0);
        S.setLayer(-1);
        std::vector<T> out = c.grpo.vllm ? vllmRollout() : generate();
        if (c.dpo.reference != Reference::None) {
            S.setPhase(step, Phase::Reference, 0);
            out.push_back(referenceLogps());
        }
        S.setOp("grpo.advantages");
        out.push_back(S.make(8, 8));                   // completion_mask.sum()
        out.push_back(S.make(gs.completions * 4, 4)); // the advantages
        for (T &t : rolloutOut)
            S.drop(t);
        rolloutOut = std::move(out);
    }

    // HF generate over the G prompts under no_grad, checkpointing off (TRL's
    // unwrap_model_for_generation): the prefill fills every layer's cache (attentionOutput), each
    // decode step concatenates a token onto every layer's keys and values. The decode step's own
    // tensors (a token a sequence: a few KB a layer) are left out.
    std::vector<T> generate()
    {
        const int64_t G = gs.completions;
        ShapeScope shape(*this, G, gs.prompt);
        const bool grad = S.gradEnabled();
        S.setGradEnabled(false);
        checkpointingOff = true;
        int64_t cached = 0;
        sim::GenerationModel model;
        model.prefill = [&] {
            kv.on = true;
            kv.keys.assign(layers.size(), T{});
            kv.values.assign(layers.size(), T{});
            T fn = hidden(prompts);
            kv.on = false;
            cached = gs.prompt;
            T logits = keptLogits(fn, 1); // logits_to_keep = 1
            S.drop(fn);
            clearAmpCache();
            return logits;
        };
        model.decode = [&] {
            S.setOp("generate.kv_cache");
            for (size_t l = 0; l < layers.size(); ++l) {
                S.setLayer(static_cast<int>(l));
                for (T *cache : {&kv.keys[l], &kv.values[l]}) {
                    T grown = S.make(cache->bytes / cached * (cached + 1), cache->elem, Category::Activations);
                    S.drop(*cache);
                    *cache = grown;
                }
            }
            S.setLayer(-1);
            ++cached;
            S.setOp("lm_head");
            return S.make(checkedMul(checkedMul(G, V), ce), ce, Category::Logits);
        };
        model.release = [&] {
            for (auto *list : {&kv.keys, &kv.values}) {
                for (T &t : *list)
                    S.drop(t);
                list->clear();
            }
        };
        std::vector<T> out = sim::grpoGenerate(S, gs, model, prompts, promptMask);
        checkpointingOff = false;
        S.setGradEnabled(grad);
        return out;
    }

    // With use_vllm, vLLM generates (its share of the card is the verdict's, Estimate::colocatedShare;
    // with vllm_mode server it runs on other GPUs); TRL pads what it returns onto the device:
    // completion ids and mask [G, C] int64 and vLLM's log-probabilities of the sampled tokens [G, C]
    // fp32; then the policy's own log-probabilities under no_grad, a micro-batch at a time
    // (old_per_token_logps, for vLLM's importance-sampling correction), and the ratio [G, C] fp32
    // the loss multiplies by. vLLM's weight sync (LoRA's merge and unmerge) is left out.
    std::vector<T> vllmRollout()
    {
        const int64_t rows = checkedMul(gs.completions, gs.completion);
        S.setOp("vllm.completions");
        std::vector<T> out = {S.make(rows * 8, 8), S.make(rows * 8, 8), S.make(rows * 4, 4)};
        S.setOp("grpo.old_logps_inputs");
        const int64_t all = checkedMul(gs.completions, s) * 8;
        T ids = S.make(all, 8), mask = S.make(all, 8);
        out.push_back(sim::grpoReferenceLogps(S, O, gs, [&] {
            T chunk = S.view(ids, checkedMul(tok, 8));
            T logits = grpoLogits(chunk, Pass::PolicyNoGrad);
            S.drop(chunk);
            return logits;
        }));
        S.drop(ids);
        S.drop(mask);
        S.setOp("grpo.importance_sampling");
        out.push_back(S.make(rows * 4, 4));
        return out;
    }

    // The CausalLM's lm_head over the last `keep` positions of each sequence (logits_to_keep):
    // hidden_states[:, -keep:, :] (a view), then F.linear. matmul folds the sequences into rows,
    // copying a slice that is not contiguous (several sequences), where the weight requires grad
    // (at::native should_fold); elsewhere bmm reads the view.
    T keptLogits(const T &fn, int64_t keep)
    {
        S.setOp("lm_head");
        const int64_t rows = checkedMul(b, keep);
        T sliced = O.slice(fn, checkedMul(rows, h));
        const bool fold = full && !referencePass && b > 1 && keep > 1;
        T xin = fold ? O.copy(sliced) : S.view(sliced);
        const int64_t stepTok = tok;
        tok = rows;
        T logits = lmHeadLogits(xin);
        tok = stepTok;
        S.drop(xin);
        S.drop(sliced);
        return logits;
    }

    // GRPO's forward to its kept logits (logits_to_keep = C + 1) over `ids` [b, P + C]: the
    // policy's own, or the reference's (no_grad; the adapter off, or the frozen copy).
    T grpoLogits(const T &ids, Pass pass)
    {
        adaptersOff = pass == Pass::Reference && c.dpo.reference == Reference::Adapter;
        checkpointingOff = pass != Pass::Policy;
        referencePass = pass == Pass::Reference;
        T fn = hidden(ids);
        T logits = keptLogits(fn, gs.completion + 1);
        S.drop(fn);
        clearAmpCache();
        if (pass == Pass::Policy)
            par->forwardDone();
        adaptersOff = checkpointingOff = referencePass = false;
        return logits;
    }

    // The engine's reference phase: torch.cat of the prompts and the completions (and of their
    // masks), then TRL's no_grad log-probabilities a micro-batch at a time.
    T referenceLogps()
    {
        S.setOp("grpo.reference_inputs");
        const int64_t all = checkedMul(gs.completions, s) * 8;
        T ids = S.make(all, 8), mask = S.make(all, 8);
        T logps = sim::grpoReferenceLogps(S, O, gs, [&] {
            T chunk = S.view(ids, checkedMul(tok, 8)); // input_ids[start : start + b]
            T logits = grpoLogits(chunk, Pass::Reference);
            S.drop(chunk);
            return logits;
        });
        S.drop(ids);
        S.drop(mask);
        return logps;
    }

    // A micro-batch's _compute_loss: torch.cat of its prompts and completions (and masks), the
    // policy's forward, TRL's loss (grpo.cpp).
    T grpoStep(const T &)
    {
        S.setOp("grpo.inputs");
        T ids = S.make(checkedMul(tok, 8), 8), mask = S.make(checkedMul(tok, 8), 8);
        T logits = grpoLogits(ids, Pass::Policy);
        T loss = sim::grpoLoss(S, O, logits, gs);
        S.drop(ids);
        S.drop(mask);
        return loss;
    }

    // Issue 29: the policy's logits, then TRL's DPO loss (dpo.cpp) with the reference's forward
    // (See Note [DPO step]).
    T dpoStep(const T &ids)
    {
        T logits = modelLogits(ids, Pass::Policy);
        const sim::DpoShape d{c.microBatch, s, V, c.dpo.prompt(s), c.dpo.reference};
        return sim::dpoLoss(S, O, logits, d, [&] { return modelLogits(ids, Pass::Reference); });
    }


    // The model's forward to its logits for `pass`: the model's forward returns, the output
    // object holding the logits only; the policy's own forward ends the parallel strategy's.
    T modelLogits(const T &ids, Pass pass)
    {
        adaptersOff = pass == Pass::Reference && c.dpo.reference == Reference::Adapter;
        checkpointingOff = pass != Pass::Policy;
        T fn = hidden(ids);
        T logits = lmHeadLogits(fn);
        S.drop(fn);
        clearAmpCache();
        if (pass == Pass::Policy)
            par->forwardDone();
        adaptersOff = checkpointingOff = false;
        return logits;
    }

    // Issue 29: a reward model's step (See Note [Reward step]): the score Linear over the final
    // norm's output, then the pooling and TRL's loss (reward.cpp).
    T rewardStep(T fn)
    {
        const int64_t labels = m.scoreLabels;
        S.setOp("score");
        T w = weightFor(lmHead);
        T xin = amp ? O.to(fn, 2) : S.view(fn);
        const int le = amp ? 2 : ce;
        T logits = O.linear(xin, w, nullptr, tok, h, labels, le); // saves its input: score trains
        S.drop(xin);
        S.drop(w);
        return sim::rewardLoss(S, O, logits, sim::RewardShape{b, s, labels}, [&] {
            S.drop(fn);
            clearAmpCache();
            par->forwardDone();
        });
    }

    // Issue 29: TRL's KTO step (kto.cpp, See Note [KTO step]): each forward it asks for, the KL
    // batch's and the batch's, through the policy or the reference.
    T ktoStep(const T &ids)
    {
        const sim::KtoShape k{b, s, V, c.dpo.prompt(s), c.dpo.reference};
        return sim::ktoLoss(S, O, k, [&](sim::KtoForward kind) {
            return modelLogits(ids, kind == sim::KtoForward::Policy     ? Pass::Policy
                                    : kind == sim::KtoForward::PolicyKl ? Pass::PolicyNoGrad
                                                                        : Pass::Reference);
        });
    }

    // Issue 29: the policy's logits, then TRL's ORPO loss (orpo.cpp, See Note [ORPO step]).
    T orpoStep(const T &ids)
    {
        T logits = modelLogits(ids, Pass::Policy);
        return sim::orpoLoss(S, O, logits, sim::OrpoShape{c.microBatch, s, V, c.dpo.prompt(s), c.dpo.chosenNll});
    }

    // The lm_head and the loss over the final norm's output `fn` (consumed).
    T headAndLoss(T fn)
    {
        if (c.loss == Loss::Fused) {
            // Liger: no lm_head module call, no logits; under autocast the chunks' matmuls use
            // the cached bf16 copy of the weight (autocast's cache, a trainable leaf).
            S.setOp("loss");
            T cast;
            if (amp)
                cast = weightFor(lmHead);
            T loss = O.fusedLinearCrossEntropy(fn, lmHead, b, s, h, V, amp ? 2 : ce);
            S.drop(fn);
            if (cast.valid())
                S.drop(cast);
            clearAmpCache();
            par->forwardDone();
            return loss;
        }
        T logits = lmHeadLogits(fn);
        S.setOp("loss");
        T loss = O.causalLmLoss(logits, b, s, V);
        // The final norm's output lives on in the model output (last_hidden_state) until the
        // CausalLM forward returns, after the loss: it matters where the lm_head does not save it
        // (LoRA; measured, every LoRA stream: freed just before the logits).
        S.drop(fn);
        S.drop(logits); // the output object goes before backward
        for (T &t : outputLocals) // Gemma 3's and LLaVA's image_hidden_states are in it too
            S.drop(t);
        outputLocals.clear();
        // The engine's `with autocast: loss = model(...).loss`: the output object goes at the end
        // of the statement, then autocast's exit clears its cache of weight casts (only visible
        // where no node keeps them: under activation offload, measured on the H200).
        clearAmpCache();
        par->forwardDone();
        return loss;
    }

    // ------------------------------------------------------------------ optimizers
    // One optimizer.step(): the optimizer's own file in sim/optim/ allocates its state and
    // temporaries.
    void optimizerStep(int step)
    {
        S.setLayer(-1);
        S.setOp("optimizer.step");
        // torch.optim skips a parameter whose .grad is None: no state, no temporaries (LLaVA's
        // trained CLIP layers past vision_feature_layer and its post_layernorm feed nothing the
        // loss reads). Where a parameter's gradient is its own tensor (one GPU).
        std::vector<T *> withGrad;
        for (T *p : stepped)
            if (!par->ownGradients() || p->param < 0 || S.gradOf(p->param) >= 0)
                withGrad.push_back(p);
        sim::OptimizerStep o{S, withGrad, c, step == 0, state};
        sim::simOptimizer(c.optimizer).step(o);
    }

    std::vector<int> state;
};

} // namespace

Timeline simulateRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options,
                     int measuredSteps)
{
    Timeline t;
    t.source = "estimate";
    t.steadyStep = 1;
    Run r(model, config, options, t);
    r.run(measuredSteps);
    return t;
}

Timeline simulateMeasuredRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options)
{
    Timeline t = simulateRun(model, config, options, 1);
    if (!repeatLastStep(t))
        t = simulateRun(model, config, options, 2);
    return t;
}

namespace sim {

const SimOptimizer &simOptimizer(Optimizer o)
{
    static const std::vector<const SimOptimizer *> all = {
#define HEADROOM_OPTIMIZER(name) &optimizer_##name(),
#include "optimizers.inc"
#undef HEADROOM_OPTIMIZER
    };
    for (const SimOptimizer *s : all)
        for (Optimizer id : s->ids)
            if (id == o)
                return *s;
    throw InputError("optimizer", std::string(toString(o)), "no simulated step (core/sim/optim/) serves it");
}

} // namespace sim

OptimizerStateBytes optimizerStateBytes(const TrainingConfig &config, int64_t rows, int64_t cols, int elem)
{
    const sim::StateLayout l =
        sim::simOptimizer(config.optimizer).state({rows, cols, checkedMul(rows, cols), elem}, config);
    OptimizerStateBytes out;
    for (int i = 0; i < l.count; ++i)
        out.device = checkedAdd(out.device, l.bytes[static_cast<size_t>(i)]);
    out.paged = l.pagedBytes;
    return out;
}

int64_t optimizerStepTemporaryBytes(const TrainingConfig &config, int64_t largestTrainableBytes, int64_t trainableBytes)
{
    return sim::simOptimizer(config.optimizer).stepTemporaries(config, largestTrainableBytes, trainableBytes);
}

namespace sim {

std::unique_ptr<ParallelStrategy> makeParallelStrategy(const ParallelContext &ctx)
{
    static const std::vector<const ParallelKind *> all = {
#define HEADROOM_PARALLEL(name) &parallel_##name(),
#include "parallels.inc"
#undef HEADROOM_PARALLEL
    };
    const ParallelKind *chosen = nullptr;
    for (const ParallelKind *k : all)
        if (k->serves(ctx.config)) {
            if (chosen)
                throw std::logic_error(std::string("parallel strategies ") + chosen->name + " and " + k->name +
                                       " both serve one configuration (core/sim/parallel/)");
            chosen = k;
        }
    if (!chosen)
        throw std::logic_error("no parallel strategy (core/sim/parallel/) serves the configuration");
    return chosen->make(ctx);
}

} // namespace sim

} // namespace headroom
