// Properties of the estimator that hold for any model: mechanisms, not numbers.
#include "headroom/budget.h"
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/estimator.h"
#include "headroom/serialize.h"
#include "headroom/sheet.h"
#include "headroom/support.h"

#include <QtTest>

using namespace headroom;

namespace {
TrainingConfig base()
{
    TrainingConfig c;
    c.precision = Precision::BF16;
    c.microBatch = 4;
    c.seqLen = 1024;
    return c;
}
int64_t peak(const char *model, const TrainingConfig &c)
{
    return estimate(findModelPreset(model), c).peakAllocatedBytes;
}
} // namespace

class TestEstimator : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    // Issue 29 (Note [GRPO step]): the generation phase holds the DynamicCache, which grows by
    // every layer's keys and values a token; beta > 0 adds the reference's phase and, in full
    // fine-tuning, its frozen copy; what is not simulated is refused by what is missing.
    void grpoGenerationHoldsItsKvCache()
    {
        const ModelArch &m = findModelPreset("llama-3.2-1b");
        TrainingConfig c = base();
        c.mode = TrainingMode::GRPO;
        c.finetune = FineTune::LoRA;
        c.gradAccum = 2;
        c.dpo.beta = 0.0;
        c.dpo.reference = Reference::None;
        // short prompts, long completions: the cache, not the prefill, makes generation's peak
        c.dpo.promptLen = 64;
        c.seqLen = 64 + 1024;
        c.grpo.numGenerations = 4;
        const Estimate short_ = estimate(m, c);
        c.seqLen = 64 + 1088;
        const Estimate long_ = estimate(m, c);
        // 64 more tokens in each of G = 8 completions' caches: keys and values, every layer, bf16
        const int64_t cache = 2 * m.numLayers * 8 * m.numKvHeads * m.headDim * 2 * 64;
        const int64_t grew = long_.phase(Phase::Generation).peakAllocatedBytes -
                             short_.phase(Phase::Generation).peakAllocatedBytes;
        QVERIFY2(grew >= cache && grew <= cache + cache / 50,
                 qPrintable(QStringLiteral("the generation peak grew %1 bytes for %2 of cache").arg(grew).arg(cache)));
        QCOMPARE(short_.rollout.size(), size_t(1)); // beta 0: no reference
        // beta > 0: the reference's phase after generation (the adapter disabled: no weights)
        c.dpo.beta = 0.04;
        c.dpo.reference = Reference::Adapter;
        const Estimate ref = estimate(m, c);
        QCOMPARE(ref.rollout.size(), size_t(2));
        QVERIFY(ref.rollout[1].phase == Phase::Reference);
        QVERIFY(ref.phase(Phase::Reference).peakAllocatedBytes > ref.phases[0].peakAllocatedBytes);
        const nlohmann::json doc = toJson(ref);
        QCOMPARE(doc.at("phases").at(1).at("phase").get<std::string>(), std::string("generation"));
        QCOMPARE(doc.at("phases").at(2).at("phase").get<std::string>(), std::string("reference"));
        // full fine-tuning: the frozen copy, a category of its own
        c.finetune = FineTune::Full;
        c.dpo.reference = Reference::Copy;
        const Estimate copy = estimate(m, c);
        // its parameters and buffers (the rotary tables: a few KB)
        const int64_t copied = copy.phases[0].atPeak[Category::ReferenceModel];
        QVERIFY(copied >= copy.params.weightBytes && copied < copy.params.weightBytes + (int64_t(1) << 20));
        // vLLM colocated: no generation in the step, and its share of the card (modelled) out of
        // the verdict's capacity
        c.grpo.vllm = true;
        const Estimate colocated = estimate(m, c);
        QCOMPARE(colocated.colocatedShare, 0.3);
        const GpuSpec &h200 = findGpu("h200");
        const Verdict with = judge(colocated, h200, 0.1), without = judge(copy, h200, 0.1);
        QCOMPARE(with.colocatedBytes, static_cast<int64_t>(std::ceil(0.3 * static_cast<double>(h200.memoryBytes))));
        QCOMPARE(with.capacityBytes, without.capacityBytes - with.colocatedBytes);
        // too large a share: the note names the largest that fits
        c.grpo.vllmGpuMemoryUtilization = 0.9;
        const Estimate crowded = estimate(m, c);
        const auto notes = cardNotes(m, c, crowded, h200, 0.1);
        QVERIFY(std::any_of(notes.begin(), notes.end(), [](const std::string &n) {
            return n.find("with vllm_gpu_memory_utilization 0.") != std::string::npos;
        }));
        c.grpo.vllmGpuMemoryUtilization = 0.3;
        c.grpo.vllmServer = true; // on other GPUs: nothing of this card
        QCOMPARE(estimate(m, c).colocatedShare, 0.0);
        c.grpo.vllm = c.grpo.vllmServer = false;
        // refused by name: QLoRA, a cache the simulation does not follow
        c.finetune = FineTune::QLoRA;
        c.dpo.reference = Reference::Adapter;
        QVERIFY(estimateRefusal(m, c)->reason.find("QLoRA") != std::string::npos);
        c.finetune = FineTune::LoRA;
        QVERIFY(!estimateRefusal(m, c));
        const auto mla = estimateRefusal(findModelPreset("deepseek-v2-lite"), c);
        QVERIFY(mla && mla->reason.find("multi-head latent attention") != std::string::npos);
        // TRL's checks: at least two completions a prompt, dividing the generation batch
        c.grpo.numGenerations = 3;
        QVERIFY_THROWS_EXCEPTION(InputError, c.validate());
    }

    void activationsDependOnTokensNotShape()
    {
        TrainingConfig a = base(), b = base();
        a.microBatch = 1;
        a.seqLen = 4096;
        b.microBatch = 8;
        b.seqLen = 512;
        // Equal up to what scales with the sequence alone: the rotary cos/sin tables are
        // (1, seq, head_dim) since HF's position_ids have one row (modeling_llama.py).
        const double pa = double(peak("llama-3.2-1b", a));
        QVERIFY(qAbs(pa / double(peak("llama-3.2-1b", b)) - 1) < 1e-3);
        QVERIFY(qAbs(pa / double(peak("llama-3.2-1b", base())) - 1) < 1e-3);
    }
    void eagerAttentionGrowsQuadratically()
    {
        TrainingConfig a = base();
        a.attention = Attention::Eager;
        a.microBatch = 1;
        TrainingConfig b = a;
        b.seqLen = 4 * a.seqLen;
        const auto &m = findModelPreset("llama-2-7b");
        const int64_t actA = estimate(m, a).phase(Phase::Forward).atPeak[Category::Activations];
        const int64_t actB = estimate(m, b).phase(Phase::Forward).atPeak[Category::Activations];
        QVERIFY2(actB > 8 * actA, "seq x4 with materialised scores costs far more than x4");
    }
    void checkpointingLowersTheForwardPeak()
    {
        TrainingConfig c = base();
        const auto &m = findModelPreset("llama-3.1-8b");
        const int64_t off = estimate(m, c).phase(Phase::Forward).peakAllocatedBytes;
        c.gradCheckpointing = true;
        QVERIFY(estimate(m, c).phase(Phase::Forward).peakAllocatedBytes < off);
    }
    void loraKeepsOnlyAdapterState()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        const Estimate e = estimate(findModelPreset("llama-3.1-8b"), c);
        QVERIFY(e.params.trainable < e.params.total / 100);
        QCOMPARE(e.params.optimizerStateBytes, 2 * 4 * e.params.trainable); // fp32 adapters, two moments
    }
    void qloraStoresHalfAByte()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::QLoRA;
        const auto &m = findModelPreset("llama-2-7b");
        const Estimate e = estimate(m, c);
        // Linear weights at ~0.516 byte/param (NF4 + double-quantized absmax); the rest (embedding,
        // norms, lm_head: 262M of 6.74B) fp32 after prepare_model_for_kbit_training.
        const double perParam = double(e.params.weightBytes) / double(e.params.total);
        QVERIFY2(perParam > 0.64 && perParam < 0.68, qPrintable(QString::number(perParam)));
    }
    void optimizerStateBytes_data()
    {
        QTest::addColumn<int>("optimizer");
        QTest::addColumn<double>("bytesPerParam"); // bf16 parameters
        QTest::addRow("adamw") << int(Optimizer::AdamW) << 4.0;
        QTest::addRow("sgd") << int(Optimizer::SGD) << 0.0;
        QTest::addRow("sgd-momentum") << int(Optimizer::SGDMomentum) << 2.0;
        QTest::addRow("lion") << int(Optimizer::Lion) << 4.0; // bitsandbytes: fp32 state
        QTest::addRow("adamw-8bit") << int(Optimizer::AdamW8bit) << 2.03;
    }
    void optimizerStateBytes()
    {
        QFETCH(int, optimizer);
        QFETCH(double, bytesPerParam);
        TrainingConfig c = base();
        c.optimizer = Optimizer(optimizer);
        const Estimate e = estimate(findModelPreset("llama-2-7b"), c);
        QVERIFY(qAbs(double(e.params.optimizerStateBytes) / double(e.params.total) - bytesPerParam) < 0.02);
    }
    void zeroShardsPerRank()
    {
        TrainingConfig c = base();
        c.precision = Precision::AmpBF16;
        const auto &m = findModelPreset("llama-3.1-8b");
        const Estimate one = estimate(m, c);
        c.worldSize = 4;
        int64_t previous = INT64_MAX, previousStep = INT64_MAX;
        for (int stage : {1, 2, 3}) {
            c.zeroStage = stage;
            const Estimate e = estimate(m, c);
            // The backward peak can sit before any gradient exists, so stage 2 may equal stage 1 there,
            // plus its two reduce buckets, which live through backward (stage 1 reduces after it).
            // The optimizer step holds gradients, state and weights: stage 2 (FSDP2 without
            // resharding after forward) shards gradients and, at rest, the parameters too, so stage
            // 3's step is the same as stage 2's; both below stage 1's.
            const int64_t buckets = stage == 2 ? 2 * EstimatorOptions{}.ddpBucketBytes : 0;
            QVERIFY2(e.peakAllocatedBytes <= previous + buckets, "no ZeRO stage costs more");
            if (stage == 3)
                QVERIFY2(e.phase(Phase::Optimizer).peakAllocatedBytes <= previousStep, "stage 3 shards as much");
            else
                QVERIFY2(e.phase(Phase::Optimizer).peakAllocatedBytes < previousStep, "each stage shards more");
            previous = e.peakAllocatedBytes;
            previousStep = e.phase(Phase::Optimizer).peakAllocatedBytes;
        }
        // Activations are not sharded, so the peak falls by less than N; the optimizer step holds
        // only model states, which stage 3 divides by N = 4 (the rest: unsharded odds and ends).
        QVERIFY(previous < one.peakAllocatedBytes * 6 / 10);
        QVERIFY(previousStep < one.phase(Phase::Optimizer).peakAllocatedBytes / 3);
    }
    // ZeRO-3 gathers a unit whole next to its shard: with LoRA the frozen base too. At the forward
    // peak, at the loss, the root unit is gathered (embedding, final norm and lm_head, in bf16, as
    // weights), the decoder layers are back to their shards, and the last layer's flat all-gather
    // output is kept into backward (comm_ctx.all_gather_state; H200, tests/data/h200/fsdp-2026-12-02).
    void zeroThreeGathersTheRootWithLoraToo()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.worldSize = 8;
        c.zeroStage = 3;
        const auto &m = findModelPreset("llama-3.1-8b");
        const Estimate e = estimate(m, c);
        const int64_t root = (2 * m.vocabSize * m.hiddenSize + m.hiddenSize) * 2;
        const int64_t h = m.hiddenSize, kv = m.numKvHeads * m.headDim, I = m.intermediateSize;
        const int64_t layerBase = (2 * h * h + 2 * kv * h + 3 * I * h + 2 * h) * 2;                  // bf16
        const int64_t layerLora = ((h + h) + 2 * (h + kv) + (h + h) + 3 * (h + I)) * c.lora.rank * 4; // fp32 A and B
        const Breakdown &at = e.phase(Phase::Forward).atPeak;
        QCOMPARE(at[Category::Communication], layerBase + layerLora); // 8 x the shards: every dimension divides by 8
        const int64_t shards = (int64_t(m.numLayers) * (layerBase + layerLora) + root) / 8;
        QVERIFY(at[Category::Weights] >= root + shards);
        QVERIFY(at[Category::Weights] < root + shards + layerBase); // no decoder layer is gathered
        c.zeroStage = 2; // FSDP2 without resharding after forward: every layer stays gathered to backward
        const Estimate stageTwo = estimate(m, c);
        const Breakdown &two = stageTwo.phase(Phase::Forward).atPeak;
        QCOMPARE(two[Category::Communication], layerBase + layerLora);
        QVERIFY(two[Category::Weights] >= root + shards + int64_t(m.numLayers) * layerBase);
    }
    // The model states per rank at the optimizer step follow the ZeRO paper's formula (Rajbhandari
    // et al. 2020, Figure 1): stage 1 divides the state by N, stage 2 also the gradients, stage 3
    // also the weights. PyTorch AMP keeps fp32 weights and gradients (4 + 4 bytes) and AdamW two
    // fp32 moments (K = 8); pure bf16 halves all three.
    void zeroModelStatesFollowThePaper_data()
    {
        QTest::addColumn<int>("precision");
        QTest::addColumn<int>("gpus");
        QTest::addColumn<int>("stage");
        QTest::addColumn<bool>("offload");
        for (Precision p : {Precision::AmpBF16, Precision::BF16})
            for (int n : {2, 8, 64})
                for (int stage : {0, 1, 2, 3})
                    for (bool off : {false, true})
                        QTest::addRow("%s N=%d stage %d%s", std::string(toString(p)).c_str(), n, stage, off ? " offload" : "")
                            << int(p) << n << stage << off;
    }
    void zeroModelStatesFollowThePaper()
    {
        QFETCH(int, precision);
        QFETCH(int, gpus);
        QFETCH(int, stage);
        QFETCH(bool, offload);
        TrainingConfig c = base();
        c.precision = Precision(precision);
        c.worldSize = gpus;
        c.zeroStage = stage;
        c.offloadOptimizer = offload;
        const auto &m = findModelPreset("llama-3.2-1b");
        const Estimate e = estimate(m, c);
        const double psi = double(e.params.total);
        const double p = Precision(precision) == Precision::AmpBF16 ? 4 : 2; // weight and gradient bytes
        const double k = 2 * p;                                              // AdamW: exp_avg + exp_avg_sq
        const double n = gpus;
        // FSDP2's stage 2 (reshard_after_forward=False) keeps the parameters sharded at rest, as
        // stage 3 does; DeepSpeed's (the paper's, the ledger's with offload) keeps them whole.
        const double weights = stage >= 3 || (stage == 2 && !offload) ? p * psi / n : p * psi;
        const double grads = stage >= 2 ? p * psi / n : p * psi;
        const double state = offload ? 0.0 : stage >= 1 ? k * psi / n : k * psi;
        const Breakdown &at = e.phase(Phase::Optimizer).atPeak;
        // Tolerance: each shard is a tensor of its own, rounded up to the allocator's 512-byte
        // blocks (at N = 64 a norm's shard is 64 bytes), plus the rotary buffers.
        QVERIFY2(qAbs(double(at[Category::Weights]) / weights - 1) < 1e-3,
                 qPrintable(QString::number(double(at[Category::Weights]) / weights)));
        QVERIFY2(qAbs(double(at[Category::Gradients]) / grads - 1) < 1e-3,
                 qPrintable(QString::number(double(at[Category::Gradients]) / grads)));
        if (offload) {
            QCOMPARE(at[Category::OptimizerState], int64_t(0));
            QVERIFY(qAbs(double(e.params.hostOptimizerStateBytes) / ((stage >= 1 ? k / n : k) * psi) - 1) < 1e-3);
        } else if (stage == 1 && gpus > 1) {
            // ZeroRedundancyOptimizer partitions whole parameters (largest first to the least-loaded
            // rank) and the estimate takes the fullest rank: the paper's share, plus at most one
            // tensor (Llama-3.2-1B's 262M-parameter embedding at N >= 8).
            int64_t largest = 0;
            for (const ParamTensor &t : parameterInventory(m))
                largest = std::max(largest, t.numel());
            QVERIFY(double(at[Category::OptimizerState]) >= state * (1 - 1e-3));
            QVERIFY(double(at[Category::OptimizerState]) <= k * (psi / n + double(largest)) * (1 + 1e-3));
        } else {
            // AdamW's per-parameter `step` scalars add a few hundred bytes.
            QVERIFY(qAbs(double(at[Category::OptimizerState]) / state - 1) < 1e-3);
        }
    }

    void backwardAccountsForEveryGradient_data()
    {
        QTest::addColumn<QString>("id");
        QTest::addColumn<int>("finetune");
        for (const char *id : {"llama-2-7b", "qwen2.5-0.5b", "gpt2", "pythia-2.8b", "mixtral-8x7b"})
            for (FineTune f : {FineTune::Full, FineTune::LoRA})
                QTest::addRow("%s/%s", id, std::string(toString(f)).c_str()) << QString::fromLatin1(id) << int(f);
    }
    void backwardAccountsForEveryGradient()
    {
        QFETCH(QString, id);
        QFETCH(int, finetune);
        TrainingConfig c = base();
        c.finetune = FineTune(finetune);
        c.lora.targets = {"all-linear"}; // GPT-2's and NeoX's Linears are not named like Llama's
        const Estimate e = estimate(findModelPreset(id.toStdString()), c);
        // At the optimizer step every gradient the backward pass made is alive, each rounded up to
        // the allocator's 512 bytes, and of the forward's saved tensors only the batch's token ids
        // (int64, which the embedding saved) remain.
        const auto &m = findModelPreset(id.toStdString());
        int64_t tensors = 0;
        for (const ParamTensor &p : parameterInventory(m))
            tensors += p.count;
        const int64_t diff = e.phase(Phase::Optimizer).atPeak[Category::Gradients] - e.params.gradientBytes;
        QVERIFY2(diff >= 0 && diff < 512 * tensors, qPrintable(QString::number(diff)));
        const int64_t ids = c.microBatch * c.seqLen * 8;
        QVERIFY(e.phase(Phase::Optimizer).atPeak[Category::Activations] <= (ids + 511) / 512 * 512);
    }
    void overflowIsAnErrorNotAWrap()
    {
        TrainingConfig c = base();
        c.microBatch = 1 << 20;
        c.seqLen = 1 << 24;
        QVERIFY_THROWS_EXCEPTION(InputError, estimate(findModelPreset("gemma-2-27b"), c));
    }
    // PEFT refuses targets that name no module of the model; so does the estimate, naming the
    // model's own Linears. The LoRA advice for such a model takes all-linear.
    void targetsThatMatchNothingAreRefused()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.lora.targets = {"q_proj", "v_proj"};
        try {
            estimate(findModelPreset("gpt2"), c);
            QFAIL("accepted");
        } catch (const InputError &e) {
            QCOMPARE(QString::fromStdString(e.field()), QStringLiteral("lora.targets"));
            QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("c_attn, c_proj, c_fc")), e.what());
        }
        c.finetune = FineTune::Full;
        c.microBatch = 1;
        c.seqLen = 512;
        const auto recs = recommend(findModelPreset("pythia-2.8b"), c, findGpu("t4")); // NeoX: query_key_value...
        bool lora = false;
        for (const auto &r : recs)
            if (r.id == "lora") {
                lora = true;
                QCOMPARE(r.config.lora.targets, defaultLoraTargets(findModelPreset("pythia-2.8b"))); // its own names
            }
        QVERIFY(lora);
    }
    // LoRA naming the MLP projections of a model with stacked experts (Qwen3-MoE, DeepSeek-V2/V3):
    // PEFT wraps every MoE layer's experts in ParamWrappers (gate_up at rank 2r, down at r) and
    // leaves the dense MLPs and shared experts alone, as the H200 runs' parameter layouts show
    // (Qwen3-30B-A3B: 20,725,760 adapter parameters a layer). What was not measured is refused,
    // each with the field that decides it.
    void loraOnStackedExperts()
    {
        const auto &m = findModelPreset("qwen3-30b-a3b");
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.microBatch = 1;
        c.seqLen = 512;
        const Estimate e = estimate(m, c);
        QCOMPARE(e.params.trainable, m.numLayers * int64_t(20725760));
        c.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
        const Estimate attention = estimate(m, c);
        QCOMPARE(attention.params.trainable, m.numLayers * int64_t(278528));
        // the experts' deltas: W + delta saved per wrapped weight, and its gradient in backward
        const int64_t deltas = m.numExperts * 3 * m.expertIntermediateSize * m.hiddenSize * 2;
        QVERIFY(e.peakAllocatedBytes - attention.peakAllocatedBytes > deltas);
        const auto &dsv2 = findModelPreset("deepseek-v2-lite"); // dense layer 0 and shared experts: no adapters
        c.lora.targets = {"gate_proj", "up_proj", "down_proj"};
        const int64_t E = dsv2.numExperts, r = c.lora.rank;
        const int64_t perLayer = 2 * r * E * dsv2.hiddenSize + 2 * dsv2.expertIntermediateSize * 2 * r * E +
                                 r * E * dsv2.expertIntermediateSize + dsv2.hiddenSize * r * E;
        QCOMPARE(estimate(dsv2, c).params.trainable, (dsv2.numLayers - dsv2.firstDenseLayers) * perLayer);
        c.lora.targets = TrainingConfig{}.lora.targets;
        auto refused = [&](TrainingConfig t, const char *field) {
            try {
                estimate(m, t);
                QFAIL(field);
            } catch (const InputError &err) {
                QCOMPARE(QString::fromStdString(err.field()), QString::fromLatin1(field));
            }
        };
        TrainingConfig t = c;
        t.lora.dropout = 0.05; // PEFT raises
        refused(t, "lora.dropout");
        t = c;
        t.lora.targets = {"gate_proj", "down_proj"};
        refused(t, "lora.targets");
        t = c;
        t.lora.targets = {"all-linear"};
        refused(t, "lora.targets");
        t = c;
        t.finetune = FineTune::QLoRA;
        refused(t, "finetune");
        t = c;
        t.precision = Precision::AmpBF16;
        refused(t, "precision");
        t = c;
        t.worldSize = 2;
        t.zeroStage = 3;
        refused(t, "zero");
        t = c;
        t.gradCheckpointing = true; // composes: the wrappers run again in the recomputed forward
        QVERIFY(estimate(m, t).peakAllocatedBytes < e.peakAllocatedBytes);
    }
    void unknownLoraTargetIsNamed()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.lora.targets = {"q_proj", "qq_proj"};
        try {
            estimate(findModelPreset("llama-2-7b"), c);
            QFAIL("expected InputError");
        } catch (const InputError &e) {
            QCOMPARE(QString::fromStdString(e.value()), QStringLiteral("qq_proj"));
        }
    }
    // Gemma 3 keeps its embedding scale in a buffer the simulator gives no storage; under
    // activation offload the scale's save packs nothing (it read before its storage array: ASan
    // found it through the advice grid). The offload estimate is below the plain one.
    void offloadWithAStoragelessSave()
    {
        const ModelArch &m = findModelPreset("gemma-3-1b");
        TrainingConfig c = base();
        const int64_t plain = estimate(m, c).peakAllocatedBytes;
        c.activationOffload = true;
        const int64_t offloaded = estimate(m, c).peakAllocatedBytes;
        QVERIFY(offloaded > 0 && offloaded < plain);
        QCOMPARE(estimate(m, c).peakAllocatedBytes, offloaded);
    }

    // Issue 13: absurd sizes stay readable: thousands grouped, TiB (TB) past 1,024 GiB (1,000 GB),
    // and "N× the card" instead of a percentage past twice the card.
    void sizesStayReadable()
    {
        const int64_t GiB = 1073741824;
        QCOMPARE(QString::fromStdString(formatGiB(1000 * GiB)), QStringLiteral("1,000.00 GiB"));
        QCOMPARE(QString::fromStdString(formatGiB(1024 * GiB)), QStringLiteral("1.00 TiB"));
        QCOMPARE(QString::fromStdString(formatGiB(-3 * GiB / 2, 1)), QStringLiteral("-1.5 GiB"));
        QCOMPARE(QString::fromStdString(formatGiB(int64_t(2500000) * GiB, 1)), QStringLiteral("2,441.4 TiB"));
        QCOMPARE(QString::fromStdString(formatBytes(int64_t(1500000000000), Unit::GB, 1)), QStringLiteral("1.5 TB"));
        QCOMPARE(QString::fromStdString(formatBytes(int64_t(999000000000), Unit::GB, 0)), QStringLiteral("999 GB"));
        Verdict v;
        v.capacityBytes = 10 * GiB;
        v.neededBytes = 8 * GiB;
        QCOMPARE(QString::fromStdString(headroomPhrase(v)), QStringLiteral("20.0% headroom"));
        v.neededBytes = 15 * GiB;
        QCOMPARE(QString::fromStdString(headroomPhrase(v)), QStringLiteral("50.0% over the card"));
        v.neededBytes = 45900 * GiB;
        QCOMPARE(QString::fromStdString(headroomPhrase(v)), QStringLiteral("4,590× the card"));
        v.neededBytes = 40 * GiB;
        QCOMPARE(QString::fromStdString(headroomPhrase(v)), QStringLiteral("4.0× the card"));
    }

    void verdictBands()
    {
        const Estimate e = estimate(findModelPreset("llama-3.1-8b"), base());
        GpuSpec g = customGpu(double(e.deviceTotalBytes) / 1073741824.0 * 1.2);
        QVERIFY(judge(e, g).fit == Fit::Fits);
        g = customGpu(double(e.deviceTotalBytes) / 1073741824.0 * 1.05);
        QVERIFY(judge(e, g).fit == Fit::Tight);
        g = customGpu(double(e.deviceTotalBytes) / 1073741824.0 * 0.9);
        QVERIFY(judge(e, g).fit == Fit::OOM);
    }
    void recommendationsAreOrderedAndSave()
    {
        TrainingConfig c = base();
        c.microBatch = 8;
        c.seqLen = 4096;
        const auto recs = recommend(findModelPreset("llama-3.1-8b"), c, findGpu("h100-80"));
        QVERIFY(recs.size() >= 4);
        for (size_t i = 1; i < recs.size(); ++i)
            QVERIFY2(int(recs[i - 1].group) <= int(recs[i].group), "dynamic, then static, then sharding");
        for (const auto &r : recs)
            QVERIFY(r.group == RecommendationGroup::Increase ? r.savingBytes < 0 : r.savingBytes > 0);
        // Full fine-tuning of 8B at b8 x 4096 fits an 80 GB card by no single change: the first row
        // is the shortest plan that does, and its configuration really fits.
        bool single = false;
        for (const auto &r : recs)
            single = single || (r.fitsAfter && r.id != "plan" && r.id != "zero");
        QVERIFY(!single);
        QCOMPARE(QString::fromStdString(recs.front().id), QStringLiteral("plan"));
        QVERIFY(recs.front().fitsAfter);
        const auto &m = findModelPreset("llama-3.1-8b");
        QVERIFY(judge(m, recs.front().config, estimate(m, recs.front().config), findGpu("h100-80")).fit == Fit::Fits);
        // The free step first: the fused loss (no logits), then checkpointing.
        QVERIFY2(QString::fromStdString(recs.front().title).startsWith(QStringLiteral("Plan: fused cross-entropy + checkpointing")),
                 recs.front().title.c_str());
        QCOMPARE(QString::fromStdString(recs[1].id), QStringLiteral("fused-loss"));
        QCOMPARE(QString::fromStdString(recs[2].id), QStringLiteral("micro-batch"));
    }

    // A long accumulation costs its inputs only: the micro-batches between the first two and the
    // last repeat the same program on the same tensors, and simulating each of them made
    // "micro-batch 1 x accumulation 1024" (advice's plan) take 17 s, and 65,536 run out of host
    // memory. Peak allocated grows by exactly the extra input_ids; the simulation does not.
    void longAccumulationCostsItsInputsOnly()
    {
        for (FineTune ft : {FineTune::Full, FineTune::LoRA}) {
            const auto &m = findModelPreset("qwen2.5-0.5b");
            TrainingConfig c = base();
            c.finetune = ft;
            c.microBatch = 1;
            c.seqLen = 512;
            c.gradAccum = 4;
            const Estimate few = estimate(m, c);
            const size_t fewEvents = estimateTimeline(m, c).events.size();
            c.gradAccum = 4096;
            const Estimate many = estimate(m, c);
            const size_t manyEvents = estimateTimeline(m, c).events.size();
            const int64_t inputs = (4096 - 4) * c.seqLen * 8; // int64 input_ids, made at load
            QCOMPARE(many.peakAllocatedBytes - few.peakAllocatedBytes, inputs);
            for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer})
                QCOMPARE(many.phase(p).peakAllocatedBytes - few.phase(p).peakAllocatedBytes, inputs);
            QCOMPARE(manyEvents - fewEvents, size_t(4096 - 4)); // one Alloc per extra input
        }
    }

    // Issue 13: a run that fits is told how much more it can take, as configurations to apply:
    // the micro-batch (keeping the effective batch exactly when it accumulates) and the sequence.
    void fittingRunsGetIncreaseRows()
    {
        const auto &m = findModelPreset("qwen2.5-0.5b");
        const GpuSpec &gpu = findGpu("h100-80");
        TrainingConfig c = base();
        c.microBatch = 2;
        c.gradAccum = 8;
        const auto recs = recommend(m, c, gpu);
        int increases = 0;
        for (const auto &r : recs) {
            if (r.group != RecommendationGroup::Increase)
                continue;
            ++increases;
            QVERIFY(r.fitsAfter && r.savingBytes < 0);
            QVERIFY(judge(m, r.config, estimate(m, r.config), gpu).fit == Fit::Fits);
            if (r.id == "more-batch") {
                QVERIFY(r.config.microBatch > c.microBatch);
                QCOMPARE(r.config.microBatch * r.config.gradAccum, c.microBatch * c.gradAccum);
            } else {
                QCOMPARE(QString::fromStdString(r.id), QStringLiteral("longer-seq"));
                QCOMPARE(r.config.seqLen, maxSeqLen(m, c, gpu, 0.1, {}, 128));
            }
        }
        QCOMPARE(increases, 2);
        // One that does not fit gets none.
        c.microBatch = 64;
        c.seqLen = 8192;
        for (const auto &r : recommend(m, c, gpu))
            QVERIFY(r.group != RecommendationGroup::Increase);
    }

    // Issue 14: a fused linear cross-entropy (Liger's) never holds the logits: the forward keeps
    // grad_input and grad_weight instead, and one chunk of about tokens x hidden logits at a time.
    void fusedLossDropsTheLogits()
    {
        const auto &m = findModelPreset("qwen2.5-0.5b"); // vocab 151936 over hidden 896
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.microBatch = 4;
        c.seqLen = 2048;
        const int64_t tokens = c.microBatch * c.seqLen;
        const Estimate standard = estimate(m, c);
        c.loss = Loss::Fused;
        const Estimate fused = estimate(m, c);
        // The standard step holds at least the fp32 log-probabilities and their gradient.
        QVERIFY(standard.peak[Category::Logits] >= 2 * tokens * m.vocabSize * 4);
        // Fused: at most grad_input plus one chunk (next_pow2(tokens / ceil(V / h)) rows) of logits.
        const int64_t chunk = fusedLossChunkRows(tokens, m.hiddenSize, m.vocabSize);
        QCOMPARE(fusedLossChunkRows(8192, 896, 151936), int64_t(64)); // Liger: next_pow2(ceil(8192 / 170))
        QVERIFY2(fused.peak[Category::Logits] <= tokens * m.hiddenSize * 2 + chunk * m.vocabSize * 2,
                 std::to_string(fused.peak[Category::Logits]).c_str());
        QVERIFY(standard.peakAllocatedBytes - fused.peakAllocatedBytes > tokens * m.vocabSize * 4);
        // The mechanism without the simulator (ZeRO-3, QLoRA, offload) agrees with it.
        EstimatorOptions ledger;
        ledger.ledgerOnly = true;
        const Estimate l = estimate(m, c, ledger);
        QVERIFY2(std::abs(double(l.peakAllocatedBytes - fused.peakAllocatedBytes)) < 0.025 * fused.peakAllocatedBytes,
                 (std::to_string(l.peakAllocatedBytes) + " vs " + std::to_string(fused.peakAllocatedBytes)).c_str());
        // Full fine-tuning: the lm_head's gradient exists from the forward on (Liger makes it there).
        c.finetune = FineTune::Full;
        const Estimate full = estimate(m, c);
        const int64_t headGrad = m.vocabSize * m.hiddenSize * 2;
        const auto &fwd = full.phase(Phase::Forward).atPeak; // counted as the gradient it becomes
        QVERIFY(fwd[Category::Logits] + fwd[Category::Gradients] >= headGrad);
        // A saved sheet or request carries the loss only when it is fused; it reads back.
        QVERIFY(!toJson(base()).contains("loss"));
        QVERIFY(trainingConfigFromJson(toJson(c)).loss == Loss::Fused);
    }
    // Notes about the card: bf16 where there is none, how far a fitting run can grow, and the
    // smallest card that holds one that does not fit.
    void cardNotesSayWhatToDoNext()
    {
        const auto &m = findModelPreset("llama-3.2-1b");
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.microBatch = 2;
        c.seqLen = 1024;
        auto joined = [&](const GpuSpec &g) {
            std::string all;
            for (const auto &n : cardNotes(m, c, estimate(m, c), g))
                all += n + "\n";
            return QString::fromStdString(all);
        };
        const QString h100 = joined(findGpu("h100-80"));
        QVERIFY2(h100.contains(QStringLiteral("micro-batch up to ")), qPrintable(h100));
        const int64_t b = maxMicroBatch(m, c, findGpu("h100-80"));
        QVERIFY2(h100.contains(QStringLiteral("micro-batch up to %1 ").arg(b)), qPrintable(h100));
        // A Room shared by the card's notes and the advice searches once and says the same.
        {
            const GpuSpec &g = findGpu("h100-80");
            const EstimatorOptions opt;
            const Room room(m, c, g, 0.10, opt);
            QCOMPARE(room.microBatch(), b);
            QCOMPARE(room.seqLen(), maxSeqLen(m, c, g, 0.10, opt, 128));
            QVERIFY(cardNotes(m, c, estimate(m, c), g, 0.10, opt, &room) == cardNotes(m, c, estimate(m, c), g));
            const auto shared = recommend(m, c, g, 0.10, opt, &room), own = recommend(m, c, g);
            QCOMPARE(shared.size(), own.size());
            for (size_t i = 0; i < own.size(); ++i)
                QCOMPARE(shared[i].title, own[i].title);
            QVERIFY(std::any_of(own.begin(), own.end(), [](const Recommendation &r) { return r.id == "more-batch"; }));
        }
        QVERIFY2(joined(findGpu("t4")).contains(QStringLiteral("has no bf16")), "T4 has no bf16");
        c.microBatch = 64;
        c.seqLen = 8192;
        const QString big = joined(findGpu("h100-80"));
        QVERIFY2(big.contains(QStringLiteral("as it is, it fits")), qPrintable(big));
    }
    void solversFindTheEdge()
    {
        // The solvers' edge is the verdict's: judge() with the configuration replays the step
        // at the card's limit, as the caching allocator frees its cache and retries there.
        const auto &m = findModelPreset("llama-3.1-8b");
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        const GpuSpec &gpu = findGpu("h100-80");
        auto fits = [&](const TrainingConfig &t) { return judge(m, t, estimate(m, t), gpu).fit == Fit::Fits; };
        const int64_t b = maxMicroBatch(m, c, gpu);
        QVERIFY(b >= 1);
        c.microBatch = b;
        QVERIFY(fits(c));
        c.microBatch = b + 1;
        QVERIFY(!fits(c));
        // The search starts from the configuration's own value (galloping); from above the
        // edge, at it, or below, it finds the same edge.
        for (int64_t from : {int64_t(1), b, b + 1, 8 * b, int64_t(1) << 20}) {
            c.microBatch = from;
            QCOMPARE(maxMicroBatch(m, c, gpu), b);
        }
        c.microBatch = 1;
        const int64_t s = maxSeqLen(m, c, gpu);
        c.seqLen = s;
        QVERIFY(fits(c));
        c.seqLen = s + 1;
        QVERIFY(!fits(c));
        // In multiples: a multiple of 128 that fits, and the next one does not. (Near the card
        // the allocator's free-and-retry makes "fits" non-monotone: 4865..5000 tokens do not fit
        // in the reserve, 5120 and 5248 do. A solver returns an edge, not always the same one.)
        const int64_t s128 = maxSeqLen(m, c, gpu, 0.10, {}, 128);
        QCOMPARE(s128 % 128, int64_t(0));
        c.seqLen = s128;
        QVERIFY(fits(c));
        c.seqLen = s128 + 128;
        QVERIFY(!fits(c));
        QVERIFY_THROWS_EXCEPTION(InputError, maxSeqLen(m, c, gpu, 0.10, {}, 0));
    }
    // Past the unbounded peak reserved, a step can still run: the allocator frees its cache and
    // retries. The verdict says so, with the number of retries, and its need is what the replay at
    // the limit holds (tests/data/h200/boundary-2026-12-01: Qwen2.5-0.5B LoRA b4 x 9600 ran so).
    void cacheFlushesKeepAStepInside()
    {
        const auto &m = findModelPreset("qwen2.5-0.5b");
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.microBatch = 4;
        c.seqLen = 9600;
        const GpuSpec &gpu = findGpu("h200");
        const Estimate e = estimate(m, c);
        QVERIFY(e.deviceTotalBytes > gpu.memoryBytes);
        const Verdict v = judge(m, c, e, gpu, 0.0);
        QVERIFY(v.fit == Fit::Fits);
        QVERIFY(v.cacheFlushes > 0);
        QCOMPARE(v.unboundedBytes, e.deviceTotalBytes);
        QVERIFY(v.neededBytes <= gpu.memoryBytes);
        QVERIFY(cacheFlushNote(v).find("retries") != std::string::npos);
        QVERIFY(judge(e, gpu, 0.0).fit == Fit::OOM); // without the replay: over the card
        c.seqLen = 9728;
        QVERIFY(judge(m, c, estimate(m, c), gpu, 0.0).fit == Fit::OOM);
    }
    void sweepReportsWhatGrows()
    {
        const auto rows = sweep(findModelPreset("llama-3.2-1b"), base(), findGpu("a100-80"), {512, 1024, 2048}, {1, 4},
                                {false, true});
        QCOMPARE(rows.size(), size_t(12));
        QCOMPARE(QString::fromStdString(rows[0].grows), QStringLiteral("baseline"));
        QCOMPARE(QString::fromStdString(rows[1].grows), QStringLiteral("seq x2"));
        const QString md = QString::fromStdString(sweepMarkdown(rows));
        QVERIFY(md.startsWith(QStringLiteral("| config | what grows | peak allocated | peak reserved | fits? |")));
        size_t seen = 0;
        sweep(findModelPreset("llama-3.2-1b"), base(), findGpu("a100-80"), {512, 1024, 2048}, {1, 4}, {false, true}, 0.1,
              [&](size_t done, size_t) {
                  seen = done;
                  return done < 3;
              });
        QCOMPARE(seen, size_t(3)); // cancelled by the callback
    }
    // A refused configuration comes with the nearest one that estimates (the explorer's
    // one-click "Change to"); where none exists, nothing is offered.
    // Selective checkpointing (issue 14): the first N layers recompute, the rest keep their
    // activations; the peak falls as N grows, all layers is full checkpointing, and the per-op
    // ledger (FSDP here) refuses a partial one with the field named.
    void selectiveCheckpointing()
    {
        const ModelArch &m = findModelPreset("llama-3.2-1b");
        TrainingConfig c = base();
        c.microBatch = 4;
        c.seqLen = 1024;
        const int64_t none = estimate(m, c).peakAllocatedBytes;
        c.gradCheckpointing = true;
        const int64_t all = estimate(m, c).peakAllocatedBytes;
        int64_t previous = none;
        for (int64_t n : {int64_t(2), int64_t(8), int64_t(15)}) {
            c.checkpointLayers = n;
            const int64_t p = estimate(m, c).peakAllocatedBytes;
            QVERIFY2(p < previous && p > all, qPrintable(QString::number(n)));
            previous = p;
        }
        c.checkpointLayers = m.numLayers;
        QCOMPARE(estimate(m, c).peakAllocatedBytes, all);
        TrainingConfig q = c; // FSDP2 is simulated layer by layer too; optimizer offload is the ledger's
        q.worldSize = 2;
        q.zeroStage = 3;
        q.checkpointLayers = 4;
        QVERIFY(estimate(m, q).peakAllocatedBytes > 0);
        q.offloadOptimizer = true;
        QVERIFY_THROWS_EXCEPTION(InputError, estimate(m, q));
        TrainingConfig off = base();
        off.checkpointLayers = 4; // without checkpointing on
        QVERIFY_THROWS_EXCEPTION(InputError, off.validate());
        // It survives JSON, and old documents (without the key) read as all layers.
        c.checkpointLayers = 8;
        QCOMPARE(trainingConfigFromJson(toJson(c)).checkpointLayers, int64_t(8));
        QVERIFY(!toJson(base()).contains("checkpoint_layers"));
    }

    void refusedConfigurationsOfferTheirFix()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        c.lora.targets = {"all-linear"};
        const ModelArch &ds = findModelPreset("deepseek-v2-lite");
        try {
            (void)estimate(ds, c);
            QFAIL("LoRA on stacked experts is refused");
        } catch (const InputError &e) {
            const auto fix = quickFix(ds, c, e);
            QVERIFY(fix.has_value());
            QCOMPARE(fix->config.lora.targets, (std::vector<std::string>{"q_proj", "o_proj"}));
            QVERIFY(estimate(ds, fix->config).peakAllocatedBytes > 0);
        }
        TrainingConfig q = base();
        q.finetune = FineTune::QLoRA;
        q.precision = Precision::FP32;
        const ModelArch &l = findModelPreset("llama-3.2-1b");
        // Each refusal carries the rule that made it, and the fix follows the rule.
        auto refusalOf = [](const ModelArch &m, const TrainingConfig &cfg) -> Refusal {
            try {
                (void)estimate(m, cfg);
            } catch (const Refused &e) {
                return e.refusal();
            }
            return {Blocker::EngineModel, "", "", "not refused"};
        };
        const Refusal rq = refusalOf(l, q);
        QCOMPARE(int(rq.blocker), int(Blocker::QloraInFp32));
        const auto fq = quickFix(l, q, rq);
        QVERIFY(fq && fq->config.precision == Precision::BF16);
        TrainingConfig g = base();
        g.seqLen = 4096;
        const Refusal rg = refusalOf(findModelPreset("gpt2"), g);
        QCOMPARE(int(rg.blocker), int(Blocker::PastLearnedPositions));
        const auto fg = quickFix(findModelPreset("gpt2"), g, rg);
        QVERIFY(fg && fg->config.seqLen == 1024);
        // GPT-OSS's attention sinks run in eager attention only: SDPA is refused naming the field,
        // and the fix is eager attention, which estimates.
        const ModelArch &oss = findModelPreset("gpt-oss-20b");
        TrainingConfig o = base();
        o.finetune = FineTune::LoRA;
        o.attention = Attention::SDPA;
        const Refusal ro = refusalOf(oss, o);
        QCOMPARE(int(ro.blocker), int(Blocker::EagerAttentionOnly));
        QCOMPARE(ro.field, std::string("attention"));
        QCOMPARE(ro.value, std::string("sdpa"));
        const auto fo = quickFix(oss, o, ro);
        QVERIFY(fo && fo->config.attention == Attention::Eager);
        QVERIFY(estimate(oss, fo->config).peakAllocatedBytes > 0);
        // An error that is not a refusal (a bad value) has no fix.
        TrainingConfig bad = base();
        bad.microBatch = 0;
        try {
            (void)estimate(l, bad);
            QFAIL("micro-batch 0 is refused");
        } catch (const InputError &e) {
            QVERIFY(dynamic_cast<const Refused *>(&e) == nullptr);
            QVERIFY(!quickFix(l, bad, e).has_value());
        }
    }

    // See Note [Flash kernels]: a flash kernel keeps what SDPA's flash kernel keeps, so where SDPA
    // runs flash unmasked the two estimates are the same step; where SDPA needs a mask (Mistral's
    // sliding window at 8k) the flash kernel makes none and keeps no repeated k and v; MLA's
    // padded v and its output's copy cost more than SDPA's memory-efficient kernel. fp32 is
    // refused by name, and the fix (SDPA) estimates.
    void flashKernels()
    {
        TrainingConfig c = base();
        c.finetune = FineTune::LoRA;
        TrainingConfig f = c;
        f.attention = Attention::Flash;
        QCOMPARE(peak("llama-3.2-1b", f), peak("llama-3.2-1b", c));
        c.seqLen = f.seqLen = 8192;
        c.microBatch = f.microBatch = 1;
        const int64_t sdpa = peak("mistral-7b", c), flash = peak("mistral-7b", f);
        QVERIFY2(flash < sdpa, qPrintable(QStringLiteral("%1 vs %2").arg(flash).arg(sdpa)));
        c.seqLen = f.seqLen = 2048;
        QVERIFY(peak("deepseek-v2-lite", f) > peak("deepseek-v2-lite", c));
        TrainingConfig fp32 = f;
        fp32.precision = Precision::FP32;
        const ModelArch &l = findModelPreset("llama-3.2-1b");
        try {
            (void)estimate(l, fp32);
            QFAIL("a flash kernel in fp32 is refused");
        } catch (const Refused &e) {
            QCOMPARE(int(e.refusal().blocker), int(Blocker::FlashKernel));
            QCOMPARE(e.refusal().field, std::string("precision"));
            const auto fix = quickFix(l, fp32, e.refusal());
            QVERIFY(fix && fix->config.attention == Attention::SDPA);
        }
        // GPT-OSS's sinks: the flash kernel estimates, and a switch to the type keeps it.
        QVERIFY(peak("gpt-oss-20b", f) > 0);
        QVERIFY(attentionFor(findModelPreset("gpt-oss-20b"), Attention::Flash) == Attention::Flash);
        QVERIFY(attentionFor(findModelPreset("gpt-oss-20b"), Attention::SDPA) == Attention::Eager);
    }

    // TRL needs num_generations to divide the generation batch; a recipe that leaves the GPU count
    // to its launch command (open-r1: 16 x 4 a GPU, 14 generations, seven GPUs) is told the count.
    void grpoGenerationsNameTheGpuCount()
    {
        TrainingConfig c = base();
        c.mode = TrainingMode::GRPO;
        c.microBatch = 16;
        c.gradAccum = 4;
        c.grpo.numGenerations = 14;
        c.dpo.beta = 0.0;
        c.dpo.reference = Reference::None;
        try {
            c.validate();
            QFAIL("14 generations do not divide 64");
        } catch (const InputError &e) {
            QVERIFY2(QString::fromStdString(e.what()).endsWith(QStringLiteral("with 7 GPUs it does (--gpus 7)")), e.what());
        }
        c.worldSize = 7;
        c.validate();
    }

    // Issue 13's honesty grid: 240 configurations (six models from GPT-2 to Llama-3.1-8B; full,
    // LoRA, QLoRA; four shapes, with and without accumulation; four cards). On every one:
    // - no reduction changes the effective batch or saves under 0.5% of the device total;
    // - a row that says "then fits" fits;
    // - a run that fits gets an "increase" row, unless not even one more sample or 128 more
    //   tokens fit;
    // - a run that no single change fixes gets the combined plan whenever everything the plan can
    //   use together fits (checked independently here), and the plan fits.
    void adviceIsHonestOverAGrid()
    {
        struct Shape
        {
            int64_t batch, seq, accum;
        };
        const std::vector<std::string> models = {"gpt2", "qwen2.5-0.5b", "qwen3-0.6b", "gemma-3-1b", "llama-3.2-1b", "llama-3.1-8b"};
        const std::vector<Shape> shapes = {{1, 512, 1}, {4, 1024, 3}, {8, 2048, 1}, {6, 4096, 2}};
        std::vector<std::pair<std::string, TrainingConfig>> grid;
        for (const auto &id : models)
            for (FineTune ft : {FineTune::Full, FineTune::LoRA, FineTune::QLoRA})
                for (const Shape &sh : shapes)
                    for (const char *gpu : {"rtx-4090", "a100-40", "h100-80"}) {
                        TrainingConfig c = base();
                        c.finetune = ft;
                        c.microBatch = sh.batch;
                        c.seqLen = id == "gpt2" ? std::min<int64_t>(sh.seq, 1024) : sh.seq;
                        c.gradAccum = sh.accum;
                        c.lora.targets = loraTargetsFor(findModelPreset(id), c.lora.targets);
                        grid.emplace_back(id + "@" + gpu, c);
                    }
        for (const auto &id : models) // fp32 full fine-tuning with accumulation on an 80 GB A100
            for (const Shape &sh : shapes) {
                TrainingConfig c = base();
                c.precision = Precision::FP32;
                c.microBatch = sh.batch;
                c.seqLen = id == "gpt2" ? std::min<int64_t>(sh.seq, 1024) : sh.seq;
                c.gradAccum = 4;
                grid.emplace_back(id + "@a100-80", c);
            }
        QCOMPARE(grid.size(), size_t(240));
        // The sanitizer job (ten times slower) walks every 8th configuration; the dev job all.
        const int stride = std::clamp(qEnvironmentVariableIntValue("HEADROOM_ADVICE_GRID_STRIDE"), 1, 16);
        int fitting = 0, planned = 0, increases = 0, walked = 0;
        for (size_t gi = 0; gi < grid.size(); gi += size_t(stride)) {
            const auto &[key, c] = grid[gi];
            ++walked;
            const std::string id = key.substr(0, key.find('@'));
            const ModelArch &m = findModelPreset(id);
            const GpuSpec &gpu = findGpu(key.substr(key.find('@') + 1));
            const std::string where = key + " b" + std::to_string(c.microBatch) + "x" + std::to_string(c.seqLen) + " ga" +
                                      std::to_string(c.gradAccum) + " " + std::string(toString(c.finetune));
            const Estimate e = estimate(m, c);
            const bool fits = judge(m, c, e, gpu).fit == Fit::Fits;
            const auto recs = recommend(m, c, gpu);
            bool single = false, plan = false, grow = false;
            for (const auto &r : recs) {
                const std::string what = where + ": " + r.title;
                if (r.group == RecommendationGroup::Increase) {
                    grow = true;
                    QVERIFY2(r.fitsAfter, what.c_str());
                    if (r.id == "more-batch" && c.gradAccum > 1 && r.config.gradAccum > 1)
                        QVERIFY2(r.config.microBatch * r.config.gradAccum == c.microBatch * c.gradAccum, what.c_str());
                    continue;
                }
                QVERIFY2(r.config.microBatch * r.config.gradAccum == c.microBatch * c.gradAccum, what.c_str());
                QVERIFY2(double(r.savingBytes) >= 0.005 * double(e.deviceTotalBytes), what.c_str());
                if (r.fitsAfter) {
                    if (r.id == "plan") // the combined configuration, judged again from scratch
                        QVERIFY2(judge(m, r.config, estimate(m, r.config), gpu).fit == Fit::Fits, what.c_str());
                    single = single || (r.id != "plan" && r.id != "zero");
                    plan = plan || r.id == "plan";
                }
            }
            if (fits) {
                ++fitting;
                increases += grow;
                TrainingConfig more = c, longer = c;
                more.microBatch += 1;
                longer.seqLen += 128;
                auto fitsAt = [&](const TrainingConfig &t) {
                    try {
                        return judge(m, t, estimate(m, t), gpu).fit == Fit::Fits;
                    } catch (const InputError &) {
                        return false;
                    }
                };
                QVERIFY2(grow || (!fitsAt(more) && !fitsAt(longer)), (where + ": fits, but no increase row").c_str());
            } else if (!single) {
                // Everything the plan can combine, at once.
                TrainingConfig all = c;
                all.attention = Attention::SDPA;
                all.loss = Loss::Fused;
                all.gradCheckpointing = true;
                all.gradAccum = c.microBatch * c.gradAccum;
                all.microBatch = 1;
                if (all.precision == Precision::FP32)
                    all.precision = Precision::AmpBF16;
                if (all.optimizer == Optimizer::AdamW)
                    all.optimizer = Optimizer::AdamW8bit;
                all.finetune = FineTune::QLoRA;
                all.lora.targets = loraTargetsFor(m, all.lora.targets);
                all.offloadOptimizer = true;
                bool allFits = false;
                try {
                    allFits = judge(m, all, estimate(m, all), gpu).fit == Fit::Fits;
                } catch (const InputError &) {
                }
                planned += plan;
                QVERIFY2(plan || !allFits, (where + ": a combined plan fits, none offered").c_str());
            }
        }
        std::printf("%d of %d fit (%d with an increase row); %d fixed only by a combined plan\n", fitting, walked, increases,
                    planned);
        QVERIFY(fitting * 6 >= walked && fitting * 6 <= walked * 5); // the grid spans both sides of every card
        QVERIFY(planned * 48 >= walked);
    }

    void everyPresetEstimates_data()
    {
        QTest::addColumn<QString>("id");
        for (const auto &m : modelPresets())
            QTest::addRow("%s", m.id.c_str()) << QString::fromStdString(m.id);
    }
    void everyPresetEstimates()
    {
        QFETCH(QString, id);
        const ModelArch &m = findModelPreset(id.toStdString());
        // LoRA on stacked MoE experts (PEFT ParamWrapper) is refused with a named field; those
        // presets are estimated with the attention's targets.
        const bool wrapped = familyTraits(m.modelType).expertsWrappedByPeft;
        for (FineTune f : {FineTune::Full, FineTune::LoRA, FineTune::QLoRA})
            for (Precision p : {Precision::BF16, Precision::AmpBF16}) {
                TrainingConfig c = base();
                c.finetune = f;
                c.precision = p;
                c.lora.targets = {"all-linear"};
                if (wrapped && f != FineTune::Full) {
                    QVERIFY_THROWS_EXCEPTION(InputError, estimate(m, c));
                    c.lora.targets = {"q_proj", "o_proj"};
                }
                // GPT-OSS's attention sinks: SDPA is refused, eager estimates.
                if (familyTraits(m.modelType).attentionSinks) {
                    QVERIFY_THROWS_EXCEPTION(Refused, estimate(m, c));
                    c.attention = Attention::Eager;
                }
                // A vision-language checkpoint: estimated in bf16 with LoRA or full fine-tuning of its
                // language model (Note [Vision step]); QLoRA and autocast are refused by name.
                if (familyTraits(m.modelType).visionLanguage && (f == FineTune::QLoRA || isAmp(p))) {
                    try {
                        (void)estimate(m, c);
                        QFAIL("a vision-language step in QLoRA or under autocast must be refused");
                    } catch (const Refused &r) {
                        QCOMPARE(r.refusal().blocker, Blocker::VisionLanguage);
                    }
                    continue;
                }
                // Qwen3.5's gated DeltaNet under autocast: refused for the trace to answer.
                if (m.hasLinearAttention() && isAmp(p)) {
                    try {
                        (void)estimate(m, c);
                        QFAIL("a gated DeltaNet under autocast must be refused");
                    } catch (const Refused &r) {
                        QVERIFY(traceAnswers(r.refusal().blocker));
                    }
                    continue;
                }
                const Estimate e = estimate(m, c);
                QVERIFY(e.peakAllocatedBytes >= e.params.weightBytes);
                QVERIFY(e.deviceTotalBytes > e.peakReservedBytes);
                for (auto b : e.peak.bytes)
                    QVERIFY(b >= 0);
            }
    }
};

QTEST_GUILESS_MAIN(TestEstimator)
#include "tst_estimator.moc"
