// Issue 30: vision-language checkpoints read from their config.json (the tower's and projector's
// parameters as published), the image and video tokens as the processors count them, the vision
// block through the config JSON, the engine's request and the CLI, and the refusals.
#include "headroom/catalog.h"
#include "headroom/config_json.h"
#include "headroom/error.h"
#include "headroom/estimator.h"
#include "headroom/measurement.h"
#include "headroom/model.h"
#include "headroom/sheet.h"
#include "headroom/support.h"
#include "headroom/training_formats.h"
#include "headroom/vision.h"

#include <QProcess>
#include <QtTest>

#include <algorithm>

#include <fstream>
#include <nlohmann/json.hpp>

using namespace headroom;
using nlohmann::json;

namespace {
json configFile(const QString &name)
{
    std::ifstream in(QStringLiteral(HEADROOM_SOURCE_DIR "/tests/data/configs/vl/%1.json").arg(name).toStdString());
    return json::parse(in);
}

ModelArch vl(const QString &name)
{
    return modelFromHfConfig(configFile(name), name.toStdString());
}

std::string errorOf(const std::function<void()> &f)
{
    try {
        f();
    } catch (const InputError &e) {
        return e.what();
    }
    return "(no error)";
}
} // namespace

class TestVision : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    // The language model, the tower and the projector add up to the checkpoint's published size
    // (the Hub's safetensors count).
    void checkpointsCountAsPublished_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qint64>("published");
        QTest::addColumn<qint64>("tower");
        QTest::addRow("Qwen2.5-VL-7B-Instruct") << QStringLiteral("qwen2.5-vl-7b") << qint64(8292166656) << qint64(631975680);
        QTest::addRow("Qwen3-VL-8B-Instruct") << QStringLiteral("qwen3-vl-8b") << qint64(8767123696) << qint64(415891440);
        QTest::addRow("gemma-3-4b-it") << QStringLiteral("gemma-3-4b-it") << qint64(4300079472) << qint64(416866032);
        QTest::addRow("llava-1.5-7b-hf") << QStringLiteral("llava-1.5-7b") << qint64(7063427072) << qint64(303507456);
    }
    void checkpointsCountAsPublished()
    {
        QFETCH(QString, file);
        QFETCH(qint64, published);
        QFETCH(qint64, tower);
        const ModelArch m = vl(file);
        QVERIFY(familyTraits(m.modelType).visionLanguage);
        QCOMPARE(m.vision.towerParams, tower);
        QCOMPARE(parameterCount(m) + m.vision.towerParams + m.vision.projectorParams, published);
    }

    // Qwen2.5-VL's Hub config.json states the language model at the top level (the legacy form);
    // read either way, the same model.
    void legacyFlatConfigReadsAsNested()
    {
        const json nested = configFile(QStringLiteral("qwen2.5-vl-7b"));
        json flat = nested;
        flat.erase("text_config");
        for (const auto &[k, v] : nested.at("text_config").items())
            if (k != "model_type")
                flat[k] = v;
        const ModelArch a = modelFromHfConfig(nested, "n"), b = modelFromHfConfig(flat, "f");
        QCOMPARE(parameterCount(a), parameterCount(b));
        QCOMPARE(b.vision.towerParams, a.vision.towerParams);
        QCOMPARE(b.numLayers, int64_t(28));
        QVERIFY(errorOf([&] {
                    json bad = nested;
                    bad.erase("vision_config");
                    modelFromHfConfig(bad, "x");
                }).find("config.vision_config") != std::string::npos);
    }

    // Qwen2VLImageProcessor's smart_resize, values worked by hand from its Python: multiples of
    // patch x merge, Python's round (halves to even), the max bound by floor, the min bound by ceil.
    void smartResizeAsThePythonDoes()
    {
        QCOMPARE(smartResize(448, 448, 28, 3136, 12845056, "f"), std::make_pair(int64_t(448), int64_t(448)));
        QCOMPARE(smartResize(70, 42, 28, 0, 1 << 30, "f"), std::make_pair(int64_t(56), int64_t(56))); // 2.5, 1.5: to even
        QCOMPARE(smartResize(1024, 1024, 28, 3136, 589824, "f"), std::make_pair(int64_t(756), int64_t(756)));
        QCOMPARE(smartResize(100, 100, 32, 65536, 16777216, "f"), std::make_pair(int64_t(256), int64_t(256)));
        QVERIFY(errorOf([] { smartResize(10, 3000, 28, 0, 1 << 30, "vision.image_size"); })
                    .find("vision.image_size = 10x3000") != std::string::npos);
        // LLaMA-Factory's own resize first: sqrt(bound / pixels), truncated
        QCOMPARE(toolResize(1024, 1024, 0, 589824), std::make_pair(int64_t(768), int64_t(768)));
        QCOMPARE(toolResize(360, 640, 0, 65536), std::make_pair(int64_t(192), int64_t(341)));
    }

    void tokensAsTheProcessorCountsThem_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("images");
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("maxPixels");
        QTest::addColumn<int>("videos");
        QTest::addColumn<int>("frames");
        QTest::addColumn<qint64>("imageTokens");
        QTest::addColumn<qint64>("videoTokens");
        QTest::addColumn<qint64>("perSample");
        // 448 / 14 = 32 patches a side, merged 2 x 2: 256 tokens, between vision_start and vision_end
        QTest::addRow("qwen2.5-vl 448") << QStringLiteral("qwen2.5-vl-7b") << 1 << 448 << 448 << 0 << 0 << 0
                                       << qint64(256) << qint64(0) << qint64(258);
        // LLaMA-Factory's image_max_pixels 768^2: 768 -> 756 -> 54 patches: 729 tokens
        QTest::addRow("qwen2.5-vl 1024 bounded") << QStringLiteral("qwen2.5-vl-7b") << 2 << 1024 << 1024 << 589824 << 0
                                                << 0 << qint64(729) << qint64(0) << qint64(2 * 731);
        // 16 frames of 360x640 bounded to 65536 pixels: 192x341 -> 196x336, 8 temporal patches of 14x24
        QTest::addRow("qwen2.5-vl video") << QStringLiteral("qwen2.5-vl-7b") << 0 << 448 << 448 << 0 << 1 << 16
                                         << qint64(0) << qint64(8 * 14 * 24 / 4) << qint64(672 + 2);
        // Qwen3-VL: patch 16, merge 2 (32 px a token side), the processor's 65536-pixel floor
        QTest::addRow("qwen3-vl 512") << QStringLiteral("qwen3-vl-8b") << 1 << 512 << 512 << 0 << 0 << 0 << qint64(256)
                                     << qint64(0) << qint64(258);
        QTest::addRow("qwen3-vl 100 floor") << QStringLiteral("qwen3-vl-8b") << 1 << 100 << 100 << 0 << 0 << 0 << qint64(64)
                                           << qint64(0) << qint64(66);
        // Qwen3-VL wraps each temporal patch of a video in its own block: 4 blocks of 12x22 / 4 + 2
        QTest::addRow("qwen3-vl video") << QStringLiteral("qwen3-vl-8b") << 0 << 448 << 448 << 0 << 1 << 8 << qint64(0)
                                       << qint64(4 * 66) << qint64(4 * (66 + 2));
        // Gemma 3: 256 tokens an image whatever its size, between <start_of_image> and <end_of_image>
        QTest::addRow("gemma3") << QStringLiteral("gemma-3-4b-it") << 3 << 2000 << 1000 << 0 << 0 << 0 << qint64(256)
                               << qint64(0) << qint64(3 * 258);
        // LLaVA 1.5: (336 / 14)^2 = 576, no markers
        QTest::addRow("llava") << QStringLiteral("llava-1.5-7b") << 1 << 100 << 100 << 0 << 0 << 0 << qint64(576) << qint64(0)
                              << qint64(576);
    }
    void tokensAsTheProcessorCountsThem()
    {
        QFETCH(QString, file);
        QFETCH(int, images);
        QFETCH(int, height);
        QFETCH(int, width);
        QFETCH(int, maxPixels);
        QFETCH(int, videos);
        QFETCH(int, frames);
        QFETCH(qint64, imageTokens);
        QFETCH(qint64, videoTokens);
        QFETCH(qint64, perSample);
        const ModelArch m = vl(file);
        TrainingConfig c;
        c.seqLen = 4096;
        c.vision.images = images;
        c.vision.imageHeight = height;
        c.vision.imageWidth = width;
        c.vision.maxPixels = maxPixels;
        c.vision.videos = videos;
        c.vision.videoFrames = frames;
        c.vision.videoHeight = 360;
        c.vision.videoWidth = 640;
        c.vision.videoMaxPixels = 65536;
        c.validate();
        const VisionTokens t = visionTokens(m, c);
        QCOMPARE(t.imageTokens, images ? imageTokens : qint64(0));
        QCOMPARE(t.videoTokens, videoTokens);
        QCOMPARE(t.perSample, perSample);
    }

    // Pixels a model cannot take, or a sequence too short for them: one line naming the field.
    void badVisionInputNamesTheField()
    {
        TrainingConfig c;
        c.vision.images = 1;
        QVERIFY(errorOf([&] { visionTokens(vl(QStringLiteral("gemma-3-4b-it")), [&] { auto v = c; v.vision.videos = 1; v.vision.videoFrames = 4; return v; }()); })
                    .find("vision.videos = 1: gemma3 takes no video") != std::string::npos);
        ModelArch text = vl(QStringLiteral("qwen2.5-vl-7b"));
        text.modelType = "qwen2";
        QVERIFY(errorOf([&] { visionTokens(text, c); }).find("vision.images = 1: qwen2 is a text model") != std::string::npos);
        c.seqLen = 200;
        QVERIFY(errorOf([&] { visionTokens(vl(QStringLiteral("gemma-3-4b-it")), c); }).find("seq = 200") != std::string::npos);
        c.vision.trainLanguage = false;
        QVERIFY(errorOf([&] { c.validate(); }).find("vision.train_language_model") != std::string::npos);
        c.vision.trainLanguage = true;
        c.vision.videos = 1;
        QVERIFY(errorOf([&] { c.validate(); }).find("vision.video_frames = 0") != std::string::npos);
    }

    // The block reads back as written; a text step writes none (documents from before stay the same).
    void visionBlockRoundTrips()
    {
        TrainingConfig c;
        QVERIFY(!toJson(c).contains("vision"));
        c.vision.images = 2;
        c.vision.imageHeight = 336;
        c.vision.imageWidth = 504;
        c.vision.maxPixels = 589824;
        c.vision.videos = 1;
        c.vision.videoFrames = 16;
        c.vision.trainTower = true;
        const TrainingConfig back = trainingConfigFromJson(toJson(c));
        QCOMPARE(toJson(back).dump(), toJson(c).dump());
        QCOMPARE(back.vision.imageWidth, int64_t(504));
        json bad = toJson(c);
        bad["vision"]["image_size"] = {336};
        QVERIFY(errorOf([&] { trainingConfigFromJson(bad); }).find("config.vision.image_size") != std::string::npos);
        bad["vision"]["image_size"] = {336, 0};
        QVERIFY(errorOf([&] { trainingConfigFromJson(bad); }).find("config.vision.image_size.width = 0") != std::string::npos);
    }

    // A measurement's and a sheet's one-line summary says the pixels and what trains; a text step's
    // stays as it was.
    void summariesSayThePixels()
    {
        TrainingConfig c;
        const std::string text = summarize(c);
        QVERIFY(describeVision(c.vision).empty());
        c.vision.images = 2;
        c.vision.imageHeight = 1024;
        c.vision.imageWidth = 768;
        c.vision.maxPixels = 589824;
        c.vision.trainTower = true;
        QCOMPARE(summarize(c), text + ", 2 images 1024x768 (at most 589824 px), training the vision tower and the language model");
        c.vision = {};
        c.vision.videos = 1;
        c.vision.videoFrames = 16;
        c.vision.trainLanguage = false;
        c.vision.trainProjector = true;
        QCOMPARE(describeVision(c.vision), std::string(", 1 video of 16 frames 256x256, training the projector"));
    }

    // The engine's request carries the checkpoint processor's bounds for its own token count, and
    // a vision-language checkpoint is built whole even for a text-only step.
    void requestCarriesTheProcessorBounds()
    {
        ProbeRequest r;
        r.model = vl(QStringLiteral("qwen3-vl-8b"));
        r.config.vision.images = 1;
        const json j = toJson(r);
        QCOMPARE(j.at("config").at("vision").at("processor_min_pixels").get<int64_t>(), int64_t(65536));
        QCOMPARE(j.at("config").at("vision").at("video_processor_max_pixels").get<int64_t>(), int64_t(25165824));
        r.config.vision = {};
        QVERIFY(toJson(r).at("config").contains("vision"));
        r.model = findModelPreset("llama-3.2-1b");
        QVERIFY(!toJson(r).at("config").contains("vision"));
    }

    // Qwen2.5-VL, Qwen3-VL, Gemma 3 and LLaVA with the tower and projector frozen are estimated
    // (Note [Vision step]), the tower's weights counted and said; a trained tower or projector,
    // another family's tower, QLoRA and the post-training modes are refused by name (Measure now
    // runs them); the LibTorch engine sends every vision-language step to the transformers engine.
    void estimatedWhereSimulated()
    {
        TrainingConfig c;
        c.vision.images = 1;
        const ModelArch m = vl(QStringLiteral("qwen2.5-vl-7b"));
        const Estimate e = estimate(m, c);
        QCOMPARE(e.params.total, int64_t(8292166656)); // the published size (full fine-tuning: no adapters)
        QVERIFY(std::any_of(e.notes.begin(), e.notes.end(), [](const std::string &n) {
            return n.rfind("the weights hold the vision tower and projector, frozen: 0.68 B parameters, 1.26 GiB", 0) == 0;
        }));
        // more pixels, more memory: the tower's transients and the sequence's image tokens
        TrainingConfig big = c;
        big.vision.images = 4;
        big.vision.imageHeight = big.vision.imageWidth = 1024;
        big.seqLen = 8192;
        QVERIFY(estimate(m, big).peakAllocatedBytes > e.peakAllocatedBytes);
        QCOMPARE(libtorchRefusal(m, c)->blocker, Blocker::EngineVision);
        // a trained tower and projector (full fine-tuning) cost their gradients, state and activations
        TrainingConfig trained = c;
        trained.vision.trainTower = trained.vision.trainProjector = true;
        QVERIFY(estimate(m, trained).peakAllocatedBytes > e.peakAllocatedBytes);
        // LoRA on the tower's Linears where it trains (Note [Vision LoRA]): its adapters trainable
        TrainingConfig towerLora = c;
        towerLora.finetune = FineTune::LoRA;
        towerLora.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
        const int64_t lmOnly = estimate(m, towerLora).params.trainable;
        towerLora.vision.trainTower = true;
        const auto &tw = m.vision.tower;
        // gate, up and down in every block: A (r x in) and B (out x r)
        QCOMPARE(estimate(m, towerLora).params.trainable - lmOnly, tw.depth * 16 * 3 * (tw.hidden + tw.inter));
        for (auto change : {+[](TrainingConfig &t) { t.finetune = FineTune::QLoRA; },
                            +[](TrainingConfig &t) {
                                t.mode = TrainingMode::DPO;
                                t.dpo.reference = Reference::Copy;
                            }}) {
            TrainingConfig t = c;
            change(t);
            try {
                (void)estimate(m, t);
                QFAIL("estimated");
            } catch (const Refused &r) {
                QCOMPARE(r.refusal().blocker, Blocker::VisionLanguage);
                QVERIFY(std::string(r.what()).find("Measure now") != std::string::npos);
            }
        }
        // Qwen3-VL (deepstack), Gemma 3 (SigLIP, block-causal masks) and LLaVA (CLIP's hidden
        // states) are simulated too: each counts as published, and more pixels cost more
        for (const auto &[other, published] : {std::pair{"qwen3-vl-8b", int64_t(8767123696)},
                                               {"gemma-3-4b-it", int64_t(4300079472)},
                                               {"llava-1.5-7b", int64_t(7063427072)}}) {
            const ModelArch o = vl(QLatin1String(other));
            const Estimate oe = estimate(o, c);
            QCOMPARE(oe.params.total, published);
            TrainingConfig more = c;
            more.vision.images = 3;
            QVERIFY2(estimate(o, more).peakAllocatedBytes > oe.peakAllocatedBytes, other);
        }
        // Checkpointing hooks a SigLIP or CLIP tower's patch embedding, which puts the tower in the
        // graph, each layer checkpointed: its layers' inputs are held to backward
        TrainingConfig ckpt = c;
        ckpt.finetune = FineTune::LoRA;
        ckpt.gradCheckpointing = true;
        QVERIFY(estimate(vl(QStringLiteral("qwen3-vl-8b")), ckpt).peakAllocatedBytes > 0);
        // Qwen2.5-VL's patch_embed is hooked too: every block's input is held to backward, more
        // than checkpointing's text side alone would keep for a large image
        TrainingConfig bigCkpt = ckpt;
        bigCkpt.vision.imageHeight = bigCkpt.vision.imageWidth = 1344;
        bigCkpt.seqLen = 4096;
        QVERIFY(estimate(m, bigCkpt).phase(Phase::Forward).peakAllocatedBytes >
                estimate(m, ckpt).phase(Phase::Forward).peakAllocatedBytes);
        for (const char *vit : {"gemma-3-4b-it", "llava-1.5-7b"}) {
            const ModelArch o = vl(QLatin1String(vit));
            const Estimate held = estimate(o, ckpt);
            TrainingConfig noCkpt = ckpt;
            noCkpt.gradCheckpointing = false;
            QVERIFY2(held.phase(Phase::Forward).peakAllocatedBytes > 0, vit);
            QVERIFY2(estimate(o, noCkpt).peakAllocatedBytes > held.peakAllocatedBytes, vit);
        }
        // a trained tower is simulated for every family here; its deepstack mergers train too
        QVERIFY(estimate(vl(QStringLiteral("qwen3-vl-8b")), trained).params.trainable >
                estimate(vl(QStringLiteral("qwen3-vl-8b")), c).params.trainable);
        TrainingConfig tower = c;
        tower.vision.trainTower = tower.vision.trainProjector = true;
        QVERIFY(estimate(vl(QStringLiteral("llava-1.5-7b")), tower).params.trainable >
                estimate(vl(QStringLiteral("llava-1.5-7b")), c).params.trainable);
        // Qwen3-VL's MoE language model (vl4-2026-12-06): estimated, and LoRA on q ... down_proj
        // adapts its attention only (PEFT 0.21 wraps none of Qwen3VLMoeTextExperts' stacked
        // parameters), where Qwen3-MoE's text row has the experts wrapped too
        json moe = configFile(QStringLiteral("qwen3-vl-8b"));
        moe["model_type"] = "qwen3_vl_moe";
        moe["text_config"]["model_type"] = "qwen3_vl_moe_text";
        moe["text_config"]["num_experts"] = 8;
        moe["text_config"]["num_experts_per_tok"] = 2;
        moe["text_config"]["moe_intermediate_size"] = 768;
        moe["text_config"]["decoder_sparse_step"] = 1;
        const ModelArch o = modelFromHfConfig(moe, "qwen3-vl-moe");
        TrainingConfig lora = c;
        lora.finetune = FineTune::LoRA;
        lora.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
        const Estimate moeEstimate = estimate(o, lora);
        QVERIFY(moeEstimate.peakVision.total() > 0);
        const int64_t H = o.hiddenSize, r = lora.lora.rank;
        const int64_t q = o.numHeads * o.headDim, kv = o.numKvHeads * o.headDim;
        QCOMPARE(moeEstimate.params.trainable, o.numLayers * r * ((H + q) + 2 * (H + kv) + (q + H)));
    }

    // Public recipes' pixel bounds and freezing, as their tools apply them: LLaMA-Factory's keys;
    // Axolotl trains what it loads (processor_type) unless freeze_mm_modules, or LoRA targets by
    // a pattern over the language model's layers, leave the tower and the projector out.
    // Note [Vision share]: of the breakdown at the peak, what the tower and its projector hold,
    // from the tensors the step made for them (their weights; trained, their gradients and state;
    // their activations, temporaries and the features they hand on), in the estimate, its JSON,
    // the sheets and the CLI's table.
    void visionShareOfTheBreakdown()
    {
        const ModelArch m = vl(QStringLiteral("qwen2.5-vl-7b"));
        const int64_t towerBytes = visionParameterCount(m) * 2; // bf16
        TrainingConfig c;
        c.finetune = FineTune::LoRA;
        c.vision.images = 2;
        const Estimate frozen = estimate(m, c);
        const Breakdown &v = frozen.peakVision;
        // every tower and projector weight, each rounded up to the allocator's 512 bytes
        QVERIFY2(v[Category::Weights] >= towerBytes && v[Category::Weights] < towerBytes + 512 * 1024,
                 qPrintable(QString::number(v[Category::Weights] - towerBytes)));
        QCOMPARE(v[Category::Gradients], int64_t(0));
        QCOMPARE(v[Category::OptimizerState], int64_t(0)); // LoRA's adapters are the language model's
        // frozen, nothing of its forward outlives the language model's (its features are freed
        // when forward returns); the cuBLAS workspaces its first GEMMs make are the process's
        QVERIFY2(v[Category::Temporaries] < 8 << 20, qPrintable(QString::number(v[Category::Temporaries])));
        QCOMPARE(v[Category::Activations], int64_t(0));
        for (Category cat : kAllCategories)
            QVERIFY(v[cat] <= frozen.peak[cat]);
        QCOMPARE(frozen.peakVision.bytes, frozen.phase(frozen.peakPhase).vision.bytes);
        // trained in full: its gradients and AdamW's two moments, each the tower's size
        TrainingConfig full = c;
        full.finetune = FineTune::Full;
        full.vision.trainTower = full.vision.trainProjector = true;
        full.gradCheckpointing = true;
        const Estimate trained = estimate(m, full);
        const Breakdown &t = trained.phase(Phase::Optimizer).vision;
        QCOMPARE(t[Category::Weights], v[Category::Weights]);
        // (the weights hold the rotary tables' inv_freq buffers too, which have no gradient)
        QVERIFY(t[Category::Gradients] <= t[Category::Weights] && t[Category::Gradients] > t[Category::Weights] - 4096);
        QCOMPARE(t[Category::OptimizerState], 2 * t[Category::Gradients]);
        // a text model, and a step that feeds no pixels (its tower's weights alone)
        QCOMPARE(estimate(findModelPreset("llama-3.2-1b"), TrainingConfig{}).peakVision.total(), int64_t(0));
        TrainingConfig none = c;
        none.vision.images = 0;
        const Breakdown idle = estimate(m, none).peakVision;
        QCOMPARE(idle[Category::Weights], v[Category::Weights]);
        QCOMPARE(idle.total(), idle[Category::Weights]);
        // where it is written: the sheet's table and its CSV rows
        Sheet s;
        s.scenario.model = m;
        s.scenario.config = c;
        s.scenario.gpu = findGpu("h100-80");
        const std::string md = sheetMarkdown(s), csv = sheetCsv(s);
        QVERIFY2(md.find("Of it, the vision tower and projector") != std::string::npos, md.c_str());
        QVERIFY(csv.find("vision_category,weights," + std::to_string(v[Category::Weights])) != std::string::npos);
    }

    // Note [Recipe images]: a recipe states its pixel bound, not its images: one image a sample at
    // the bound (dynamic resolution), at the tower's size (fixed), said; nothing on a text model
    // or where images or video are set.
    void recipeImagesAreAssumedAndSaid()
    {
        const ModelArch q = vl(QStringLiteral("qwen3-vl-8b"));
        TrainingConfig c;
        c.vision.maxPixels = 262144;
        const auto note = assumeRecipeImages(q, c);
        QVERIFY(note && note->find("1 image a sample, 512x512, the recipe's pixel bound") != std::string::npos);
        QCOMPARE(c.vision.images, int64_t(1));
        QCOMPARE(c.vision.imageHeight, int64_t(512));
        QCOMPARE(visionTokens(q, c).imageTokens, int64_t(256)); // 512 / 32 squared: the bound's tokens
        TrainingConfig unbounded;
        QVERIFY(assumeRecipeImages(q, unbounded)->find("no pixel bound") != std::string::npos);
        TrainingConfig fixed;
        QVERIFY(assumeRecipeImages(vl(QStringLiteral("llava-1.5-7b")), fixed)->find("336x336") != std::string::npos);
        QCOMPARE(fixed.vision.imageWidth, int64_t(336));
        TrainingConfig video;
        video.vision.videos = 1;
        video.vision.videoFrames = 4;
        QVERIFY(!assumeRecipeImages(q, video));
        TrainingConfig text;
        QVERIFY(!assumeRecipeImages(findModelPreset("llama-3.2-1b"), text));
        QCOMPARE(text.vision.images, int64_t(0));
    }

    // Note [Vision build]: Qwen3.5's text preset is estimated as its checkpoint's whole build where
    // the step feeds images (or the recipe has vision settings, or its tool loads the whole
    // checkpoint), and stays the text model otherwise; the CLI and the imports say so.
    void visionBuildIsTakenForImages()
    {
        ModelArch m = findModelPreset("qwen3.5-9b");
        TrainingConfig text;
        QVERIFY(!takeVisionBuild(m, text));
        QCOMPARE(QString::fromStdString(m.id), QStringLiteral("qwen3.5-9b"));
        TrainingConfig images;
        images.vision.images = 1;
        const auto note = takeVisionBuild(m, images);
        QVERIFY(note && note->find("qwen3.5-9b-vl, the vision tower included") != std::string::npos);
        QCOMPARE(QString::fromStdString(m.modelType), QStringLiteral("qwen3_5"));
        QCOMPARE(visionTokens(m, images).imageTokens, int64_t(196)); // 448 / 32 squared
        QVERIFY(m.vision.tower.deepstack.empty());
        // the same language model, the tower beside it
        QCOMPARE(checkpointParameterCount(m) - parameterCount(findModelPreset("qwen3.5-9b")), int64_t(456010480));
        ModelArch moe = findModelPreset("qwen3.5-35b-a3b");
        QVERIFY(takeVisionBuild(moe, text, true)); // LLaMA-Factory's loader
        QCOMPARE(QString::fromStdString(moe.id), QStringLiteral("qwen3.5-35b-a3b-vl"));
        ModelArch llama = findModelPreset("llama-3.2-1b");
        QVERIFY(!takeVisionBuild(llama, images, true)); // no vision build: visionTokens refuses the images
        // the recipes (the CLI's and the explorer's import do this; expected.tsv holds the CLI's):
        // Axolotl's processor recipe feeds images to the build, LLaMA-Factory's text recipe loads the
        // build without images
        auto imported = [](const char *recipe, const char *preset, bool whole) {
            const TrainingImport in = importTrainingConfigFile(HEADROOM_SOURCE_DIR "/tests/data/recipes/" + std::string(recipe));
            QCOMPARE(in.settings.wholeCheckpoint, whole);
            TrainingConfig c;
            in.settings.applyTo(c);
            ModelArch model = findModelPreset(preset);
            const bool textData = c.vision.isDefault();
            QVERIFY(takeVisionBuild(model, c, in.settings.wholeCheckpoint));
            if (!textData)
                QVERIFY(assumeRecipeImages(model, c));
            QCOMPARE(QString::fromStdString(model.id), QString::fromLatin1(preset) + QStringLiteral("-vl"));
            QCOMPARE(c.vision.images, int64_t(textData ? 0 : 1));
        };
        imported("axolotl/examples/qwen3.5/9b-lora-vision.yaml", "qwen3.5-9b", false);
        imported("LLaMA-Factory/examples/ascend/qwen3_5moe_lora_sft_fsdp2.yaml", "qwen3.5-35b-a3b", true);
        // an Axolotl text recipe on the same checkpoint stays the text model
        const TrainingImport textRecipe =
            importTrainingConfigFile(HEADROOM_SOURCE_DIR "/tests/data/recipes/axolotl/examples/qwen3.5/27b-qlora.yaml");
        TrainingConfig tc;
        textRecipe.settings.applyTo(tc);
        ModelArch t27 = findModelPreset("qwen3.5-27b");
        QVERIFY(!takeVisionBuild(t27, tc, textRecipe.settings.wholeCheckpoint));
    }

    // Note [Vision LoRA]: a tower none of whose Linears the targets name gets no adapter and runs
    // frozen (Qwen3-VL's qkv, proj, linear_fc1, linear_fc2 under q_proj ... down_proj), estimated as
    // such; a target that names one of them is refused by name until simulated.
    void loraNamesDecideWhatOfTheTowerTrains()
    {
        const ModelArch m = vl(QStringLiteral("qwen3-vl-8b"));
        TrainingConfig c;
        c.vision.images = 1;
        c.finetune = FineTune::LoRA;
        c.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
        const Estimate frozen = estimate(m, c);
        c.vision.trainTower = true;
        QVERIFY(!visionLora(m, c).any());
        const Estimate named = estimate(m, c);
        QCOMPARE(named.peakAllocatedBytes, frozen.peakAllocatedBytes);
        QCOMPARE(named.params.trainable, frozen.params.trainable);
        c.lora.targets.push_back("linear_fc1");
        try {
            (void)estimate(m, c);
            QFAIL("LoRA on Qwen3-VL's linear_fc1 estimated");
        } catch (const Refused &r) {
            QCOMPARE(r.refusal().field, std::string("vision.train_vision_tower"));
        }
    }

    void recipesSayWhatTrains_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qint64>("maxPixels");
        QTest::addColumn<bool>("tower");
        QTest::addColumn<bool>("projector");
        QTest::addRow("LLaMA-Factory qwen3vl full") << QStringLiteral("LLaMA-Factory/examples/train_full/qwen3vl_full_sft.yaml")
                                                   << qint64(262144) << false << false;
        QTest::addRow("LLaMA-Factory qwen3vl lora") << QStringLiteral("LLaMA-Factory/examples/train_lora/qwen3vl_lora_sft.yaml")
                                                   << qint64(262144) << false << false;
        QTest::addRow("Axolotl full vision") << QStringLiteral("axolotl/examples/mistral4/fft-vision.yml") << qint64(0) << true
                                            << true;
        QTest::addRow("Axolotl freeze_mm_modules") << QStringLiteral("axolotl/examples/gemma4/e2b-vision-lora.yaml") << qint64(0)
                                                  << false << false;
        QTest::addRow("Axolotl language-model pattern") << QStringLiteral("axolotl/examples/qwen2_5-vl/lora-7b.yaml")
                                                       << qint64(0) << false << false;
    }
    void recipesSayWhatTrains()
    {
        QFETCH(QString, file);
        QFETCH(qint64, maxPixels);
        QFETCH(bool, tower);
        QFETCH(bool, projector);
        const TrainingImport in =
            importTrainingConfigFile(HEADROOM_SOURCE_DIR "/tests/data/recipes/" + file.toStdString());
        TrainingConfig c;
        in.settings.applyTo(c);
        QCOMPARE(c.vision.maxPixels, int64_t(maxPixels));
        QCOMPARE(c.vision.trainTower, tower);
        QCOMPARE(c.vision.trainProjector, projector);
        QVERIFY(c.vision.trainLanguage);
    }

    // The CLI's flags, and their one-line errors.
    void cliFlags()
    {
        const QString file = QStringLiteral(HEADROOM_SOURCE_DIR "/tests/data/configs/vl/qwen2.5-vl-7b.json");
        auto run = [&](const QStringList &extra) {
            QProcess p;
            p.start(QStringLiteral(HEADROOM_CLI), QStringList{QStringLiteral("estimate"), QStringLiteral("--model"), file} + extra);
            p.waitForFinished(60000);
            return QString::fromUtf8(p.readAllStandardError()).trimmed();
        };
        QVERIFY(run({QStringLiteral("--images"), QStringLiteral("1"), QStringLiteral("--image-size"), QStringLiteral("10y3")})
                    .contains(QStringLiteral("--image-size = 10y3: must be HxW in pixels")));
        QVERIFY(run({QStringLiteral("--videos"), QStringLiteral("1")}).contains(QStringLiteral("vision.video_frames = 0")));
        QVERIFY(run({QStringLiteral("--images"), QStringLiteral("8"), QStringLiteral("--image-size"), QStringLiteral("2048"),
                     QStringLiteral("--seq"), QStringLiteral("1024")})
                    .contains(QStringLiteral("seq = 1024: holds no room for the sample's images and videos: they take 42648 tokens "
                                             "(5329 per image)")));
        // LoRA on Qwen2.5-VL's tower estimates (no error); on LLaVA's CLIP it is refused by name
        QCOMPARE(run({QStringLiteral("--images"), QStringLiteral("1"), QStringLiteral("--finetune"), QStringLiteral("lora"),
                      QStringLiteral("--train-vision-tower")}),
                 QString());
        QProcess p;
        p.start(QStringLiteral(HEADROOM_CLI),
                {QStringLiteral("estimate"), QStringLiteral("--model"), QStringLiteral("llava-1.5-7b"), QStringLiteral("--images"),
                 QStringLiteral("1"), QStringLiteral("--finetune"), QStringLiteral("lora"), QStringLiteral("--train-vision-tower")});
        p.waitForFinished(60000);
        QVERIFY2(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("LoRA on this vision tower is not yet")),
                 "LoRA on CLIP refused");
    }
};

QTEST_GUILESS_MAIN(TestVision)
#include "tst_vision.moc"
