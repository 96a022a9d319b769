#include "configpanel.h"

#include <nlohmann/json.hpp>

#include "hubfetch.h"
#include "qtutil.h"
#include "visionbox.h"

#include "headroom/catalog.h"

#include <algorithm>
#include <cmath>
#include "headroom/error.h"
#include "headroom/hub.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCompleter>
#include <QDoubleSpinBox>
#include <QAbstractButton>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>

using namespace headroom;

namespace {
// The objective combo's data: SFT 0, DPO 1 + its reference, KTO kKtoObjective + its reference,
// ORPO kOrpoObjective, a reward model kRewardObjective.
constexpr int kKtoObjective = 4;
constexpr int kOrpoObjective = 8;
constexpr int kRewardObjective = 16;
constexpr int kGrpoObjective = 32; // GRPO, beta 0 (TRL's default: no reference)
constexpr int kGrpoKlObjective = 33;     // GRPO with beta 0.04: the adapter disabled (LoRA) or a copy
constexpr int kGrpoVllmObjective = 34;   // GRPO, vLLM colocated (its share of the card modelled)

// Steps by doubling and halving, as batch and sequence length are usually explored.
class PowerOfTwoSpinBox : public QSpinBox
{
public:
    using QSpinBox::QSpinBox;
    void stepBy(int steps) override
    {
        int v = value();
        for (; steps > 0; --steps)
            v = v >= maximum() / 2 ? maximum() : v * 2;
        for (; steps < 0; ++steps)
            v = std::max(minimum(), v / 2);
        setValue(v);
    }
};

int log2Floor(int64_t v)
{
    int k = 0;
    while ((int64_t(1) << (k + 1)) <= v)
        ++k;
    return k;
}

// A combo box of one of core's enum tables (types.cpp), its labels in the table's order.
template<typename Row>
QComboBox *enumCombo(const char *name, const std::vector<Row> &table, QWidget *parent)
{
    auto *c = new QComboBox(parent);
    c->setObjectName(QLatin1String(name));
    for (const auto &r : table)
        c->addItem(QString::fromUtf8(r.label.data(), int(r.label.size())), static_cast<int>(r.id));
    return c;
}

void setComboData(QComboBox *c, int value)
{
    const QSignalBlocker block(c);
    c->setCurrentIndex(std::max(0, c->findData(value)));
}

} // namespace

namespace {
// 124M, 1.24B, 70.6B: a preset's size in the model list
QString parameterLabel(int64_t n)
{
    const double b = double(n) / 1e9;
    if (b < 1.0)
        return QStringLiteral("%1M").arg(std::lround(double(n) / 1e6));
    return QStringLiteral("%1B").arg(b, 0, 'f', b < 10 ? 2 : 1);
}
} // namespace

ConfigPanel::ConfigPanel(Session *session, QWidget *parent)
    : QWidget(parent)
    , m_session(session)
    , m_models(modelPresets())
{
    auto *outer = new QVBoxLayout(this);

    // Model
    auto *modelBox = new QGroupBox(tr("Model"), this);
    auto *modelLayout = new QVBoxLayout(modelBox);
    m_model = new QComboBox(modelBox);
    m_model->setObjectName(QStringLiteral("model"));
    m_model->setEditable(true);
    m_model->setInsertPolicy(QComboBox::NoInsert);
    m_model->completer()->setFilterMode(Qt::MatchContains);
    m_model->completer()->setCompletionMode(QCompleter::PopupCompletion);
    m_model->setToolTip(tr("Type to search the presets, type a Hugging Face id (org/name: the local cache, then the Hub), "
                            "or import a config.json (also by drag and drop)"));
    // The presets by size, each with its parameter count (issue 31: users pick by size)
    std::vector<std::pair<int64_t, size_t>> bySize;
    for (size_t i = 0; i < m_models.size(); ++i)
        bySize.emplace_back(checkpointParameterCount(m_models[i]), i);
    std::stable_sort(bySize.begin(), bySize.end());
    for (const auto &[count, i] : bySize)
        m_model->addItem(tr("%1 · %2").arg(qs(m_models[i].name), parameterLabel(count)), static_cast<int>(i));
    auto *importButton = new QPushButton(tr("Import config.json…"), modelBox);
    importButton->setObjectName(QStringLiteral("importConfig"));
    connect(importButton, &QPushButton::clicked, this, &ConfigPanel::importConfigRequested);
    m_modelInfo = new QLabel(modelBox);
    m_modelInfo->setTextFormat(Qt::PlainText);
    m_modelInfo->setObjectName(QStringLiteral("modelInfo"));
    m_modelInfo->setWordWrap(true);
    // The window's text colour (palette(mid) was too faint to read on a light theme).
    modelLayout->addWidget(m_model);
    modelLayout->addWidget(importButton);
    modelLayout->addWidget(m_modelInfo);
    outer->addWidget(modelBox);

    // Training
    auto *trainBox = new QGroupBox(tr("Training"), this);
    auto *form = new QFormLayout(trainBox);
    m_finetune = enumCombo("finetune", fineTuneTable(), trainBox);
    // Issue 29: what the step trains; DPO's and a reward model's batch is pairs (2 sequences
    // each). Data: 0 SFT, 1 + the reference for DPO, kRewardObjective for a reward model.
    m_objective = new QComboBox(trainBox);
    m_objective->setObjectName(QStringLiteral("objective"));
    m_objective->addItem(tr("Supervised (SFT)"), 0);
    m_objective->addItem(tr("DPO, reference: the adapter disabled"), 1 + static_cast<int>(Reference::Adapter));
    m_objective->addItem(tr("DPO, reference: a frozen copy"), 1 + static_cast<int>(Reference::Copy));
    m_objective->addItem(tr("DPO, reference log-probs precomputed"), 1 + static_cast<int>(Reference::None));
    m_objective->addItem(tr("KTO, reference: the adapter disabled"), kKtoObjective + static_cast<int>(Reference::Adapter));
    m_objective->addItem(tr("KTO, reference: a frozen copy"), kKtoObjective + static_cast<int>(Reference::Copy));
    m_objective->addItem(tr("KTO, reference log-probs precomputed"), kKtoObjective + static_cast<int>(Reference::None));
    m_objective->addItem(tr("ORPO (no reference)"), kOrpoObjective);
    m_objective->addItem(tr("Reward model (sequence classifier)"), kRewardObjective);
    m_objective->addItem(tr("GRPO (generates its completions)"), kGrpoObjective);
    m_objective->addItem(tr("GRPO with KL to the reference"), kGrpoKlObjective);
    m_objective->addItem(tr("GRPO, vLLM colocated (0.3)"), kGrpoVllmObjective);
    m_objective->setToolTip(tr("DPO as TRL's DPOTrainer runs it: the micro-batch counts pairs (a chosen and a "
                               "rejected sequence each), and the reference's forward runs beside the policy's. "
                               "KTO as TRL's KTOTrainer runs it: unpaired sequences and its KL batch, through the "
                               "policy and the reference. ORPO: pairs, no reference. A reward model as TRL's "
                               "RewardTrainer trains it: pairs through a one-label score head instead of the lm_head. "
                               "GRPO as TRL's GRPOTrainer runs it: micro-batch x accumulation completions generated "
                               "each step (HF generate's KV cache; or vLLM, whose share of the card is modelled), then "
                               "the step on prompt + completion; beta > 0 adds the reference's pass"));
    m_loraRank = new QSpinBox(trainBox);
    m_loraRank->setObjectName(QStringLiteral("loraRank"));
    m_loraRank->setRange(1, 1024);
    m_loraTargets = new QLineEdit(trainBox);
    m_loraTargets->setObjectName(QStringLiteral("loraTargets"));
    m_loraTargets->setToolTip(tr("Comma-separated module names as PEFT takes them: q_proj, v_proj, … or all-linear; "
                                 "empty: every Linear of the model, by its own names"));
    m_doubleQuant = new QCheckBox(tr("Double quantization"), trainBox);
    m_doubleQuant->setObjectName(QStringLiteral("doubleQuant"));
    m_precision = enumCombo("precision", precisionTable(), trainBox);
    // From core's optimizer table: labels and tooltips (what each keeps) in its order.
    m_optimizer = enumCombo("optimizer", optimizerTable(), trainBox);
    for (int i = 0; i < m_optimizer->count(); ++i) {
        const std::string_view help = optimizerTable()[size_t(i)].help;
        m_optimizer->setItemData(i, QString::fromUtf8(help.data(), int(help.size())), Qt::ToolTipRole);
    }
    m_optimizerImpl = enumCombo("optimizerImpl", optimizerImplTable(), trainBox);
    m_attention = enumCombo("attention", attentionTable(), trainBox);
    m_checkpointing = new QCheckBox(tr("Gradient checkpointing"), trainBox);
    m_checkpointing->setObjectName(QStringLiteral("checkpointing"));
    m_checkpointLayers = new QSpinBox(trainBox);
    m_checkpointLayers->setObjectName(QStringLiteral("checkpointLayers"));
    m_checkpointLayers->setSpecialValueText(tr("all layers"));
    m_checkpointLayers->setPrefix(tr("first "));
    m_checkpointLayers->setSuffix(tr(" layers"));
    m_checkpointLayers->setToolTip(tr("Selective checkpointing: only the first N decoder layers recompute their "
                                      "forward in backward; the rest keep their activations"));
    m_fusedLoss = new QCheckBox(tr("Fused linear cross-entropy (Liger)"), trainBox);
    m_fusedLoss->setObjectName(QStringLiteral("fusedLoss"));
    m_fusedLoss->setToolTip(tr("The loss computed chunk by chunk with the lm_head, so the logits never exist whole "
                               "(Liger Kernel's FusedLinearCrossEntropy, Cut Cross-Entropy)"));
    m_activationOffload = new QCheckBox(tr("Offload activations to the CPU"), trainBox);
    m_activationOffload->setObjectName(QStringLiteral("activationOffload"));
    m_activationOffload->setToolTip(tr("torch.autograd.graph.save_on_cpu: every tensor saved for backward goes to "
                                       "pinned host memory and comes back when backward needs it (Axolotl and TRL: "
                                       "activation_offloading)"));
    form->addRow(tr("Objective"), m_objective);
    form->addRow(tr("Mode"), m_finetune);
    form->addRow(tr("LoRA rank"), m_loraRank);
    form->addRow(tr("Targets"), m_loraTargets);
    form->addRow(QString(), m_doubleQuant);
    form->addRow(tr("Precision"), m_precision);
    form->addRow(tr("Optimizer"), m_optimizer);
    form->addRow(tr("Implementation"), m_optimizerImpl);
    form->addRow(tr("Attention"), m_attention);
    form->addRow(QString(), m_checkpointing);
    form->addRow(tr("Checkpoint"), m_checkpointLayers);
    form->addRow(QString(), m_fusedLoss);
    form->addRow(QString(), m_activationOffload);
    m_loraOnly = {m_loraRank, m_loraTargets, form->labelForField(m_loraRank), form->labelForField(m_loraTargets)};
    outer->addWidget(trainBox);

    // Shape
    auto *shapeBox = new QGroupBox(tr("Batch"), this);
    auto *shape = new QFormLayout(shapeBox);
    const auto sliderRow = [&](const char *name, int lo, int hi, QSlider *&slider, QSpinBox *&spin) {
        slider = new QSlider(Qt::Horizontal, shapeBox);
        slider->setObjectName(QLatin1String(name) + QStringLiteral("Slider"));
        slider->setRange(log2Floor(lo), log2Floor(hi));
        slider->setPageStep(1);
        slider->setTickPosition(QSlider::TicksBelow);
        spin = new PowerOfTwoSpinBox(shapeBox);
        spin->setObjectName(QLatin1String(name));
        spin->setRange(lo, hi);
        spin->setMinimumWidth(80);
        auto *row = new QHBoxLayout;
        row->addWidget(slider, 1);
        row->addWidget(spin);
        return row;
    };
    shape->addRow(tr("Micro-batch"), sliderRow("microBatch", 1, 1024, m_batchSlider, m_batch));
    shape->addRow(tr("Sequence"), sliderRow("seqLen", 128, 131072, m_seqSlider, m_seq));
    m_prompt = new QSpinBox(shapeBox);
    m_prompt->setObjectName(QStringLiteral("promptLen"));
    m_prompt->setRange(0, 131071);
    m_prompt->setSpecialValueText(tr("half the sequence"));
    m_prompt->setSuffix(tr(" tokens"));
    m_prompt->setToolTip(tr("Post-training: each sequence is its prompt, then its completion (GRPO generates the "
                            "completion: the sequence less the prompt)"));
    shape->addRow(tr("Prompt"), m_prompt);
    m_gradAccum = new QSpinBox(shapeBox);
    m_gradAccum->setObjectName(QStringLiteral("gradAccum"));
    m_gradAccum->setRange(1, 4096);
    m_gradAccum->setToolTip(tr("Accumulation does not change the peak; it keeps the effective batch when the micro-batch shrinks."));
    shape->addRow(tr("Grad. accumulation"), m_gradAccum);
    outer->addWidget(shapeBox);
    m_vision = new VisionBox(session, this);
    outer->addWidget(m_vision);

    // Hardware
    auto *hwBox = new QGroupBox(tr("GPUs"), this);
    auto *hw = new QFormLayout(hwBox);
    m_gpu = new QComboBox(hwBox);
    m_gpu->setObjectName(QStringLiteral("gpu"));
    for (const GpuSpec &g : gpuCatalog())
        m_gpu->addItem(tr("%1 (%2)").arg(qs(g.name), qs(formatBytes(g.memoryBytes, Unit::GiB, 0))), qs(g.id));
    m_gpu->addItem(tr("Custom capacity…"), QStringLiteral("custom"));
    m_capacity = new QDoubleSpinBox(hwBox);
    m_capacity->setObjectName(QStringLiteral("customGiB"));
    m_capacity->setRange(1, 4096);
    m_capacity->setDecimals(1);
    m_capacity->setSuffix(QStringLiteral(" GiB"));
    m_gpuCount = new QSpinBox(hwBox);
    m_gpuCount->setObjectName(QStringLiteral("gpuCount"));
    m_gpuCount->setRange(1, 4096);
    m_zero = new QComboBox(hwBox);
    m_zero->setObjectName(QStringLiteral("zeroStage"));
    m_zero->addItem(tr("0 · data parallel (DDP)"), 0);
    m_zero->addItem(tr("1 · shard optimizer state"), 1);
    m_zero->addItem(tr("2 · + shard gradients"), 2);
    m_zero->addItem(tr("3 · + shard weights (FSDP)"), 3);
    m_offload = new QCheckBox(tr("Optimizer state on the CPU (ZeRO-Offload)"), hwBox);
    m_offload->setObjectName(QStringLiteral("offloadOptimizer"));
    m_reserve = new QSpinBox(hwBox);
    m_reserve->setObjectName(QStringLiteral("reserve"));
    m_reserve->setRange(0, 50);
    m_reserve->setSuffix(QStringLiteral(" %"));
    m_reserve->setToolTip(tr("Keep 10–15% of the card free: a longer sample, fragmentation or another process on "
                             "the GPU needs it. A run inside the reserve is \"tight\"."));
    hw->addRow(tr("GPU"), m_gpu);
    hw->addRow(tr("Capacity"), m_capacity);
    hw->addRow(tr("GPU count"), m_gpuCount);
    hw->addRow(tr("ZeRO stage"), m_zero);
    hw->addRow(QString(), m_offload);
    hw->addRow(tr("Reserve"), m_reserve);
    m_allocConf = new QLineEdit(hwBox);
    m_allocConf->setObjectName(QStringLiteral("allocConf"));
    m_allocConf->setPlaceholderText(QStringLiteral("defaults, or expandable_segments:True"));
    m_allocConf->setToolTip(tr("PYTORCH_CUDA_ALLOC_CONF as your run sets it: the estimate replays the caching allocator "
                               "with it, and Measure passes it to the probe"));
    hw->addRow(tr("Allocator"), m_allocConf);
    outer->addWidget(hwBox);
    m_problem = new QLabel(this);
    m_problem->setTextFormat(Qt::PlainText);
    m_problem->setObjectName(QStringLiteral("configProblem"));
    m_problem->setWordWrap(true);
    m_problem->setStyleSheet(QStringLiteral("color: #b3261e"));
    m_problem->hide();
    // Under the model box, where they are seen without scrolling the panel.
    outer->insertWidget(outer->indexOf(modelBox) + 1, m_problem);
    // What the last import or Hub lookup could not follow; stays until the next one.
    m_notes = new QLabel(this);
    m_notes->setObjectName(QStringLiteral("configNotes"));
    m_notes->setWordWrap(true);
    m_notes->setTextFormat(Qt::PlainText); // keys echoed from a training config: never rich text (issue 32, row 8)
    m_notes->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_notes->setStyleSheet(QStringLiteral("color: #8a5a00"));
    m_notes->hide();
    outer->insertWidget(outer->indexOf(m_problem) + 1, m_notes);
    outer->addStretch(1);

    // Each control edits one field.
    connect(m_model, qOverload<int>(&QComboBox::activated), this, [this](int i) {
        const int idx = m_model->itemData(i).toInt();
        if (idx >= 0 && idx < static_cast<int>(m_models.size()))
            edit([&](Scenario &s) {
                s.config.lora.targets = loraTargetsOnSwitch(s.model, m_models[static_cast<size_t>(idx)],
                                                            s.config.lora.targets);
                s.model = m_models[static_cast<size_t>(idx)];
                s.config.seqLen = seqLenFor(s.model, s.config.seqLen);
                s.config.attention = attentionFor(s.model, s.config.attention);
            });
    });
    // Typed text that is not a list entry: a preset id ("qwen2.5-7b") or a unique part of one
    // name or id selects that model; anything else goes back to the current model's name.
    connect(m_model->lineEdit(), &QLineEdit::editingFinished, this, [this] {
        const QString text = m_model->lineEdit()->text().trimmed();
        if (m_model->findText(text) >= 0)
            return;
        int found = -1, hits = 0;
        for (int i = 0; i < m_model->count(); ++i) {
            const int idx = m_model->itemData(i).toInt();
            if (idx < 0 || idx >= static_cast<int>(m_models.size()))
                continue;
            const QString id = qs(m_models[static_cast<size_t>(idx)].id);
            if (id.compare(text, Qt::CaseInsensitive) == 0) {
                found = i;
                hits = 1;
                break;
            }
            if (!text.isEmpty() && (id.contains(text, Qt::CaseInsensitive) || m_model->itemText(i).contains(text, Qt::CaseInsensitive))) {
                found = i;
                ++hits;
            }
        }
        if (hits == 1) {
            m_model->setCurrentIndex(found);
            emit m_model->activated(found);
        } else if (hub::looksLikeHubId(text.toStdString())) {
            lookUpHubModel(text);
        } else {
            m_model->lineEdit()->setText(m_model->itemText(m_model->currentIndex()));
        }
    });
    const auto onCombo = [this](QComboBox *c, auto apply) {
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this,
                [this, c, apply](int) { edit([&](Scenario &s) { apply(s, c->currentData().toInt()); }); });
    };
    onCombo(m_finetune, [](Scenario &s, int v) { s.config.finetune = static_cast<FineTune>(v); });
    onCombo(m_objective, [](Scenario &s, int v) {
        const bool wasGrpo = s.config.mode == TrainingMode::GRPO;
        s.config.mode = v == 0                  ? TrainingMode::SFT
                        : v >= kGrpoObjective   ? TrainingMode::GRPO
                        : v == kRewardObjective ? TrainingMode::Reward
                        : v == kOrpoObjective   ? TrainingMode::ORPO
                        : v >= kKtoObjective    ? TrainingMode::KTO
                                                : TrainingMode::DPO;
        if (s.config.mode == TrainingMode::DPO)
            s.config.dpo.reference = static_cast<Reference>(v - 1);
        else if (s.config.mode == TrainingMode::KTO)
            s.config.dpo.reference = static_cast<Reference>(v - kKtoObjective);
        else if (s.config.mode == TrainingMode::ORPO)
            s.config.dpo.reference = Reference::None;
        if (s.config.mode == TrainingMode::GRPO) {
            // TRL's defaults: beta 0 (no reference), and as many completions a prompt as divide
            // the generation batch, up to GRPOConfig's 8
            s.config.dpo.beta = v == kGrpoKlObjective ? 0.04 : TrainingConfig::defaultBeta(TrainingMode::GRPO);
            s.config.dpo.reference = s.config.defaultReference();
            s.config.grpo.vllm = v == kGrpoVllmObjective;
            s.config.grpo.vllmServer = false;
            s.config.grpo.numGenerations = s.config.fittingGenerations();
        } else if (wasGrpo) {
            s.config.dpo.beta = TrainingConfig::defaultBeta(s.config.mode);
        }
    });
    onCombo(m_precision, [](Scenario &s, int v) { s.config.precision = static_cast<Precision>(v); });
    onCombo(m_optimizer, [](Scenario &s, int v) { s.config.optimizer = static_cast<Optimizer>(v); });
    onCombo(m_optimizerImpl, [](Scenario &s, int v) { s.config.optimizerImpl = static_cast<OptimizerImpl>(v); });
    onCombo(m_attention, [](Scenario &s, int v) { s.config.attention = static_cast<Attention>(v); });
    onCombo(m_zero, [](Scenario &s, int v) { s.config.zeroStage = v; });
    connect(m_loraRank, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.lora.rank = v; }); });
    connect(m_allocConf, &QLineEdit::editingFinished, this,
            [this] { edit([&](Scenario &s) { s.allocConf = m_allocConf->text().trimmed().toStdString(); }); });
    connect(m_loraTargets, &QLineEdit::editingFinished, this, [this] {
        std::vector<std::string> targets;
        for (const QString &t : m_loraTargets->text().split(QLatin1Char(','), Qt::SkipEmptyParts))
            targets.push_back(t.trimmed().toStdString());
        try {
            loraTargetMask(targets);
            m_loraTargets->setStyleSheet(QString());
            // An emptied field means the model's own Linears, as no --lora-targets does (issue 33).
            edit([&](Scenario &s) { s.config.lora.targets = targets.empty() ? defaultLoraTargets(s.model) : targets; });
        } catch (const InputError &e) {
            m_loraTargets->setStyleSheet(QStringLiteral("border: 1px solid #b3261e"));
            m_problem->setText(qs(e.what()));
            m_problem->show();
        }
    });
    connect(m_doubleQuant, &QCheckBox::toggled, this, [this](bool on) { edit([&](Scenario &s) { s.config.lora.doubleQuant = on; }); });
    connect(m_offload, &QCheckBox::toggled, this,
            [this](bool on) { edit([&](Scenario &s) { s.config.offloadOptimizer = on; }); });
    connect(m_activationOffload, &QCheckBox::toggled, this,
            [this](bool on) { edit([&](Scenario &s) { s.config.activationOffload = on; }); });
    connect(m_fusedLoss, &QCheckBox::toggled, this, [this](bool on) {
        edit([&](Scenario &s) { s.config.loss = on ? Loss::Fused : Loss::Standard; });
    });
    connect(m_checkpointing, &QCheckBox::toggled, this, [this](bool on) {
        edit([&](Scenario &s) {
            s.config.gradCheckpointing = on;
            if (!on)
                s.config.checkpointLayers = 0;
        });
    });
    connect(m_checkpointLayers, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.checkpointLayers = v; }); });
    connect(m_batchSlider, &QSlider::valueChanged, this, [this](int k) { m_batch->setValue(1 << k); });
    connect(m_seqSlider, &QSlider::valueChanged, this, [this](int k) { m_seq->setValue(1 << k); });
    connect(m_batch, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.microBatch = v; }); });
    connect(m_seq, qOverload<int>(&QSpinBox::valueChanged), this, [this](int v) { edit([&](Scenario &s) { s.config.seqLen = v; }); });
    connect(m_prompt, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.dpo.promptLen = v; }); });
    connect(m_gradAccum, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.gradAccum = v; }); });
    connect(m_gpuCount, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.config.worldSize = v; }); });
    connect(m_reserve, qOverload<int>(&QSpinBox::valueChanged), this,
            [this](int v) { edit([&](Scenario &s) { s.reserve = v / 100.0; }); });
    const auto applyGpu = [this] {
        const QString id = m_gpu->currentData().toString();
        edit([&](Scenario &s) {
            // The capacity box shows the chosen units; customGpu takes GiB.
            const double gib = m_capacity->value() / toUnit(int64_t(1) << 30, m_session->units());
            s.gpu = id == QLatin1String("custom") ? customGpu(gib) : findGpu(id.toStdString());
        });
    };
    connect(m_gpu, qOverload<int>(&QComboBox::currentIndexChanged), this, applyGpu);
    connect(m_capacity, qOverload<double>(&QDoubleSpinBox::valueChanged), this, applyGpu);

    connect(session, &Session::scenarioChanged, this, &ConfigPanel::syncFromSession);
    connect(session, &Session::unitsChanged, this, &ConfigPanel::applyUnits);
    connect(session, &Session::reportReady, this, [this] {
        const std::string &err = m_session->report().error;
        m_problem->setVisible(!err.empty());
        m_problem->setText(qs(err));
    });
    syncFromSession();
    applyUnits();
}

void ConfigPanel::edit(const std::function<void(Scenario &)> &change)
{
    Scenario s = m_session->scenario();
    try {
        change(s);
    } catch (const InputError &e) {
        m_problem->setText(qs(e.what()));
        m_problem->show();
        return;
    }
    // Undoable, named after the control's label (Edit > Undo "Micro-batch"); the control that
    // sent the change keys the merging of a drag into one step.
    QObject *from = sender();
    m_session->applyScenario(s, tr("Change %1").arg(fieldLabel(from)), from);
}

QString ConfigPanel::fieldLabel(QObject *control) const
{
    for (auto *w = qobject_cast<QWidget *>(control); w && w != this; w = w->parentWidget()) {
        if (const auto *b = qobject_cast<QAbstractButton *>(w); b && !b->text().isEmpty())
            return b->text().remove(QLatin1Char('&'));
        // The form row whose field is the control, or a row layout holding it (slider + spin box).
        for (const QFormLayout *form : findChildren<QFormLayout *>())
            for (int row = 0; row < form->rowCount(); ++row) {
                QLayoutItem *field = form->itemAt(row, QFormLayout::FieldRole);
                QLayoutItem *label = form->itemAt(row, QFormLayout::LabelRole);
                if (!field || !label || !qobject_cast<QLabel *>(label->widget()))
                    continue;
                if (field->widget() == w || (field->layout() && field->layout()->indexOf(w) >= 0))
                    return static_cast<QLabel *>(label->widget())->text().remove(QLatin1Char('&'));
            }
    }
    return control ? control->objectName() : tr("the configuration");
}

int ConfigPanel::modelIndex(const ModelArch &m)
{
    const auto key = toJson(m);
    for (size_t i = 0; i < m_models.size(); ++i)
        if (m_models[i].id == m.id && toJson(m_models[i]) == key)
            return static_cast<int>(i);
    m_models.push_back(m);
    m_model->addItem(qs(m.name.empty() ? m.id : m.name) + tr(" (imported)"), static_cast<int>(m_models.size() - 1));
    return static_cast<int>(m_models.size() - 1);
}

void ConfigPanel::addImportedModel(const ModelArch &m)
{
    modelIndex(m);
    Scenario s = m_session->scenario();
    s.config.lora.targets = loraTargetsOnSwitch(s.model, m, s.config.lora.targets);
    s.model = m;
    s.config.seqLen = seqLenFor(m, s.config.seqLen);
    s.config.attention = attentionFor(m, s.config.attention);
    m_session->applyScenario(s, tr("Import %1").arg(qs(m.name)));
}

void ConfigPanel::lookUpHubModel(const QString &id)
{
    if (m_hubLookup == id)
        return;
    m_hubLookup = id;
    m_notes->hide();
    m_modelInfo->setText(tr("Looking up %1 in the Hugging Face cache, then on the Hub…").arg(id));
    lookUpModel(this, id.toStdString(), "model", [this, id](const ModelLookup &f) {
        if (m_hubLookup != id)
            return; // another id was typed since
        m_hubLookup.clear();
        if (!f.model) {
            m_model->lineEdit()->setText(m_model->itemText(m_model->currentIndex()));
            syncFromSession();
            m_problem->setText(f.error);
            m_problem->show();
            return;
        }
        addImportedModel(*f.model);
        QStringList notes;
        for (const auto &n : f.notes)
            notes << qs(n);
        if (!notes.isEmpty())
            showNotes(notes);
    });
}

void ConfigPanel::showNotes(const QStringList &notes)
{
    m_notes->setText(notes.join(QLatin1Char('\n')));
    m_notes->setVisible(!notes.isEmpty());
}

void ConfigPanel::updateVisibility()
{
    const FineTune ft = m_session->scenario().config.finetune;
    for (QWidget *w : std::as_const(m_loraOnly))
        if (w)
            w->setEnabled(ft != FineTune::Full);
    m_doubleQuant->setEnabled(ft == FineTune::QLoRA);
    m_optimizerImpl->setEnabled(m_session->scenario().config.optimizer == Optimizer::AdamW);
    m_capacity->setEnabled(m_session->scenario().gpu.id == "custom");
    // ZeRO / FSDP run on one GPU too (their buckets and gathers are estimated); DDP needs two.
    m_zero->setItemText(0, m_session->scenario().config.worldSize > 1 ? tr("0 · data parallel (DDP)") : tr("0 · none"));
}

// The GiB/GB choice reaches the GPU list and the capacity box too.
void ConfigPanel::applyUnits()
{
    const Unit u = m_session->units();
    const auto &catalog = gpuCatalog();
    for (int i = 0; i < static_cast<int>(catalog.size()) && i < m_gpu->count(); ++i)
        m_gpu->setItemText(i, tr("%1 (%2)").arg(qs(catalog[static_cast<size_t>(i)].name),
                                                qs(formatBytes(catalog[static_cast<size_t>(i)].memoryBytes, u, 0))));
    const QSignalBlocker block(m_capacity);
    m_capacity->setSuffix(QLatin1Char(' ') + qs(toString(u)));
    m_capacity->setValue(toUnit(m_session->scenario().gpu.memoryBytes, u));
}

void ConfigPanel::syncFromSession()
{
    const Scenario &s = m_session->scenario();
    const TrainingConfig &c = s.config;
    const QList<QObject *> all = {m_model, m_loraRank, m_loraTargets, m_doubleQuant, m_checkpointing, m_checkpointLayers, m_fusedLoss, m_activationOffload, m_batchSlider,
                                  m_batch, m_seqSlider, m_seq, m_prompt, m_gradAccum, m_gpu, m_capacity, m_gpuCount, m_reserve, m_offload, m_allocConf};
    std::vector<std::unique_ptr<QSignalBlocker>> blocks;
    for (QObject *o : all)
        blocks.push_back(std::make_unique<QSignalBlocker>(o));
    m_model->setCurrentIndex(m_model->findData(modelIndex(s.model)));
    if (!s.model.estimable) { // no row: what is known comes from its config.json and the trace
        const nlohmann::json &hf = s.model.hfConfig;
        auto num = [&](const char *k) { return hf.is_object() && hf.contains(k) && hf.at(k).is_number_integer() ? hf.at(k).get<int64_t>() : 0; };
        m_modelInfo->setText(tr("%1 · %2 layers · hidden %3 · no modelled row: estimated from a trace of your own stack")
                                 .arg(qs(s.model.modelType))
                                 .arg(num("num_hidden_layers"))
                                 .arg(num("hidden_size")));
    } else {
        // Issue 30: a vision-language checkpoint's tower and projector are built and loaded too
        const int64_t vision = visionParameterCount(s.model);
        m_modelInfo->setText(tr("%1 · %2 layers · hidden %3 · vocab %4 · %5 B parameters%6")
                                 .arg(qs(s.model.modelType))
                                 .arg(s.model.numLayers)
                                 .arg(s.model.hiddenSize)
                                 .arg(s.model.vocabSize)
                                 .arg(static_cast<double>(checkpointParameterCount(s.model)) / 1e9, 0, 'f', 2)
                                 .arg(vision ? tr(" (vision tower and projector %1 B)").arg(static_cast<double>(vision) / 1e9, 0, 'f', 2)
                                             : QString()));
    }
    setComboData(m_finetune, static_cast<int>(c.finetune));
    setComboData(m_objective, c.mode == TrainingMode::SFT ? 0
                              : c.mode == TrainingMode::GRPO
                                  ? (c.grpo.vllm ? kGrpoVllmObjective : c.dpo.beta > 0 ? kGrpoKlObjective : kGrpoObjective)
                              : c.mode == TrainingMode::Reward ? kRewardObjective
                              : c.mode == TrainingMode::ORPO   ? kOrpoObjective
                              : c.mode == TrainingMode::KTO    ? kKtoObjective + static_cast<int>(c.dpo.reference)
                                                               : 1 + static_cast<int>(c.dpo.reference));
    setComboData(m_precision, static_cast<int>(c.precision));
    setComboData(m_optimizer, static_cast<int>(c.optimizer));
    setComboData(m_optimizerImpl, static_cast<int>(c.optimizerImpl));
    setComboData(m_attention, static_cast<int>(c.attention));
    setComboData(m_zero, c.zeroStage);
    m_loraRank->setValue(c.lora.rank);
    QStringList targets;
    for (const auto &t : c.lora.targets)
        targets << qs(t);
    m_loraTargets->setText(targets.join(QStringLiteral(", ")));
    m_doubleQuant->setChecked(c.lora.doubleQuant);
    m_checkpointing->setChecked(c.gradCheckpointing);
    m_checkpointLayers->setRange(0, static_cast<int>(std::max<int64_t>(0, s.model.numLayers - 1)));
    m_checkpointLayers->setValue(static_cast<int>(c.checkpointLayers));
    m_checkpointLayers->setEnabled(c.gradCheckpointing);
    m_fusedLoss->setChecked(c.loss == Loss::Fused);
    m_activationOffload->setChecked(c.activationOffload);
    m_offload->setChecked(c.offloadOptimizer);
    m_batch->setValue(static_cast<int>(c.microBatch));
    m_batchSlider->setValue(log2Floor(c.microBatch));
    m_seq->setValue(static_cast<int>(c.seqLen));
    m_seqSlider->setValue(log2Floor(c.seqLen));
    m_prompt->setMaximum(static_cast<int>(std::max<int64_t>(0, c.seqLen - 1)));
    m_prompt->setValue(static_cast<int>(c.dpo.promptLen));
    m_prompt->setEnabled(hasPreferenceBlock(c.mode));
    m_gradAccum->setValue(static_cast<int>(c.gradAccum));
    const int gpuIndex = m_gpu->findData(qs(s.gpu.id));
    m_gpu->setCurrentIndex(gpuIndex >= 0 ? gpuIndex : m_gpu->count() - 1);
    m_capacity->setValue(toUnit(s.gpu.memoryBytes, m_session->units()));
    m_gpuCount->setValue(c.worldSize);
    m_reserve->setValue(static_cast<int>(std::lround(s.reserve * 100)));
    if (m_allocConf->text().trimmed().toStdString() != s.allocConf)
        m_allocConf->setText(qs(s.allocConf));
    m_vision->sync();
    updateVisibility();
}
