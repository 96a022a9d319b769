// Architecture import and exact parameter counts.
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/hub.h"
#include "headroom/model.h"

#include <QtTest>

#include <nlohmann/json.hpp>

using namespace headroom;

class TestModel : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void presetCountsMatchPublished_data()
    {
        QTest::addColumn<QString>("id");
        for (const auto &m : modelPresets())
            QTest::addRow("%s", m.id.c_str()) << QString::fromStdString(m.id);
    }
    void presetCountsMatchPublished()
    {
        QFETCH(QString, id);
        const ModelArch &m = findModelPreset(id.toStdString());
        QVERIFY2(m.publishedParams > 0, "every preset records its published count");
        // a vision-language checkpoint's count is the whole checkpoint: its tower and projector too
        QCOMPARE(checkpointParameterCount(m), m.publishedParams);
    }
    void requiredPresetsExist_data()
    {
        QTest::addColumn<QString>("id");
        for (const char *id : {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b",
                               "llama-3.2-3b", "mistral-7b", "mixtral-8x7b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b",
                               "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b",
                               "phi-3-mini", "gpt2"})
            QTest::addRow("%s", id) << QString::fromLatin1(id);
    }
    void requiredPresetsExist()
    {
        QFETCH(QString, id);
        QCOMPARE(QString::fromStdString(findModelPreset(id.toStdString()).id), id);
    }
    void importsPlainHfConfig()
    {
        const ModelArch m = resolveModel(QFINDTESTDATA("data/configs/tinyllama_1.1b.json").toStdString());
        QCOMPARE(m.numKvHeads, int64_t(4));
        QCOMPARE(m.headDim, int64_t(64));
        QCOMPARE(parameterCount(m), int64_t(1100048384)); // TinyLlama-1.1B's published count
    }
    void badConfigsNameTheField_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("mentions");
        QTest::addRow("unknown model_type") << "data/configs/unknown_type.json" << "config.model_type = bert";
        QTest::addRow("missing vocab") << "data/configs/missing_vocab.json" << "config.vocab_size";
        QTest::addRow("malformed") << "data/configs/malformed.json" << "not valid JSON";
        QTest::addRow("negative layers") << "data/configs/negative_layers.json" << "config.num_hidden_layers = -3";
        QTest::addRow("string hidden") << "data/configs/string_hidden.json" << "config.hidden_size = 4096";
        QTest::addRow("missing file") << "data/configs/nope.json" << "cannot open";
    }
    void badConfigsNameTheField()
    {
        QFETCH(QString, file);
        QFETCH(QString, mentions);
        const QString path = QStringLiteral(HEADROOM_SOURCE_DIR "/tests/") + file;
        try {
            resolveModel(path.toStdString());
            QFAIL("expected an InputError");
        } catch (const InputError &e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(mentions), e.what());
        }
    }
    // Qwen3.5's checkpoints: a composite config.json, Qwen3_5ForConditionalGeneration (Note [Vision
    // build]): the language model its text_config's, the tower Qwen3-VL's without deepstack; the
    // hybrid stack's layer kinds from layer_types; each bad field named in one line.
    void qwen3_5ReadsItsTextConfig()
    {
        using nlohmann::json;
        const json text = {{"hidden_size", 256},          {"num_hidden_layers", 4},   {"num_attention_heads", 4},
                           {"num_key_value_heads", 2},    {"head_dim", 64},           {"intermediate_size", 512},
                           {"vocab_size", 1000},          {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4},
                           {"linear_key_head_dim", 32},   {"linear_value_head_dim", 32},
                           {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}}};
        const json composite = {{"model_type", "qwen3_5"}, {"text_config", text},
                                {"vision_config", {{"depth", 2}, {"hidden_size", 64}, {"intermediate_size", 128}}}};
        const ModelArch m = modelFromHfConfig(composite, "qwen3_5-small");
        QCOMPARE(m.hiddenSize, int64_t(256));
        QCOMPARE(m.linearAttentionLayerCount(), int64_t(2));
        QVERIFY(m.isLinearAttentionLayer(0) && !m.isLinearAttentionLayer(1));
        QCOMPARE(m.linearAttn.convWidth(), int64_t(2 * 2 * 32 + 4 * 32));
        // the tower: patch embedding, positions, two blocks, the merger (LayerNorm, 256 -> 256 -> 256)
        const int64_t H = 64, I = 128, M = 4 * H, out = 256;
        const int64_t tower = (3 * 2 * 16 * 16 + 1) * H + 2304 * H + 2 * (4 * H + 3 * H * H + 3 * H + H * H + H + H * I + I + I * H + H) +
                              2 * H + M * M + M + M * out + out;
        QCOMPARE(m.vision.towerParams + m.vision.projectorParams, tower);
        QVERIFY(m.vision.tower.deepstack.empty()); // Qwen3_5VisionConfig deletes it
        json textOnly = text;
        textOnly["model_type"] = "qwen3_5_text";
        // the same language model, and the tower beside it
        QCOMPARE(parameterCount(modelFromHfConfig(textOnly, "t")) + tower, checkpointParameterCount(m));
        auto refused = [&](json c, const char *mentions) {
            try {
                (void)modelFromHfConfig(c, "bad");
                QFAIL(mentions);
            } catch (const InputError &e) {
                QVERIFY2(std::string(e.what()).find(mentions) != std::string::npos, e.what());
            }
        };
        refused(json{{"model_type", "qwen3_5"}}, "config.hidden_size = (missing)");
        json types = textOnly;
        types["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention", "full_attention"};
        refused(types, "config.layer_types = sliding_attention");
        json heads = textOnly;
        heads["linear_num_key_heads"] = 3;
        refused(heads, "config.linear_num_value_heads = 4");
    }
    // Issue 33: LoRA's default targets are the model's own Linears, and a model switch carries the
    // old model's defaults over to the new one's while targets the user chose stay.
    void loraDefaultsFollowTheModel()
    {
        const ModelArch &gpt2 = findModelPreset("gpt2"), &llama = findModelPreset("llama-3.2-1b");
        const ModelArch &neox = findModelPreset("pythia-410m");
        QCOMPARE(defaultLoraTargets(gpt2), (std::vector<std::string>{"c_attn", "c_proj", "c_fc"}));
        QCOMPARE(defaultLoraTargets(neox),
                 (std::vector<std::string>{"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}));
        QCOMPARE(defaultLoraTargets(llama), TrainingConfig().lora.targets); // the built-in default is a Llama's
        for (const ModelArch *m : {&gpt2, &neox, &llama}) {
            const auto on = loraAdaptedModules(*m, defaultLoraTargets(*m));
            for (size_t i = 0; i < on.size(); ++i) // every Linear the model has is adapted
                QCOMPARE(on[i], !linearModuleNames(*m)[i].empty());
        }
        QCOMPARE(loraTargetsOnSwitch(llama, gpt2, defaultLoraTargets(llama)), defaultLoraTargets(gpt2));
        QCOMPARE(loraTargetsOnSwitch(gpt2, llama, defaultLoraTargets(gpt2)), defaultLoraTargets(llama));
        const std::vector<std::string> mine = {"q_proj", "v_proj"};
        QCOMPARE(loraTargetsOnSwitch(gpt2, llama, mine), mine);
        QCOMPARE(loraTargetsOnSwitch(llama, gpt2, mine), defaultLoraTargets(gpt2)); // none of gpt2's
    }
    // Issue 32, row 4: a count read as int64 is range-checked before it narrows to int (2^31 was a
    // negative parameter count with exit 0; 4294967298 became 2).
    void normsPerLayerIsRangeChecked()
    {
        for (const int64_t bad : {int64_t(1) << 31, int64_t(4294967298LL), int64_t(-1)}) {
            const nlohmann::json j = {{"hidden_size", 64},       {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                      {"intermediate_size", 128}, {"vocab_size", 256},      {"norms_per_layer", bad}};
            try {
                (void)modelArchFromJson(j);
                QFAIL("norms_per_layer out of range was accepted");
            } catch (const InputError &e) {
                QVERIFY2(std::string(e.what()).find("model.norms_per_layer = " + std::to_string(bad)) != std::string::npos,
                         e.what());
            }
        }
    }
    // Issue 32, row 17: ids are validated as huggingface_hub validates them, so two ids can never
    // share one cache folder (a--b/c and a/b--c were both models--a--b--c).
    void hubIdsAreValidatedAsTheHubDoes()
    {
        QVERIFY(hub::looksLikeHubId("meta-llama/Llama-3.1-8B"));
        QVERIFY(hub::looksLikeHubId("Qwen/Qwen2.5-0.5B-Instruct"));
        QVERIFY(hub::looksLikeHubId("a_b/c_"));
        for (const char *bad : {"a--b/c", "a/b--c", "a/b..c", "a/b-", "a./b", "a/b/c", "/b", "a/"})
            QVERIFY2(!hub::looksLikeHubId(bad), bad);
    }
    void unknownPresetListsKnownIds()
    {
        try {
            findModelPreset("llama-9");
            QFAIL("expected an InputError");
        } catch (const InputError &e) {
            QCOMPARE(QString::fromStdString(e.field()), QStringLiteral("model"));
            QVERIFY(QString::fromUtf8(e.what()).contains(QStringLiteral("llama-3.1-8b")));
        }
    }
    void gpuCatalogHasTheCards()
    {
        QVERIFY(gpuCatalog().size() >= 15);
        for (const char *id : {"t4", "v100-16", "v100-32", "a10", "a100-40", "a100-80", "l4", "l40s", "rtx-3090", "rtx-4090",
                               "rtx-5090", "h100-80", "h200", "b200", "mi300x", "rtx-4060ti-16"})
            QVERIFY2(findGpu(id).memoryBytes > 10LL * 1073741824, id);
        QCOMPARE(findGpu("h200").memoryBytes, int64_t(150754820096)); // read by NVML on the H200
    }
};

QTEST_GUILESS_MAIN(TestModel)
#include "tst_model.moc"
