#include "visionbox.h"

#include "qtutil.h"

#include "headroom/error.h"
#include "headroom/vision.h"

#include <QCheckBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>

using namespace headroom;

VisionBox::VisionBox(Session *session, QWidget *parent)
    : QGroupBox(tr("Images and video"), parent)
    , m_session(session)
{
    setObjectName(QStringLiteral("visionBox"));
    auto *form = new QFormLayout(this);
    m_images = spin("images", 0, 64, tr("Images in each sample (the data's: a recipe does not say)"));
    m_imageHeight = spin("imageHeight", 1, 32768, tr("The images' height in pixels, before the processor"));
    m_imageWidth = spin("imageWidth", 1, 32768, tr("The images' width in pixels, before the processor"));
    m_maxPixels = spin("maxPixels", 0, 1 << 28, tr("The recipe's bound: images larger are shrunk to it first "
                                                   "(LLaMA-Factory's image_max_pixels; none: the processor's own)"));
    m_maxPixels->setSpecialValueText(tr("processor's"));
    m_maxPixels->setSingleStep(65536);
    m_maxPixels->setSuffix(tr(" px"));
    m_videos = spin("videos", 0, 16, tr("Videos in each sample"));
    m_frames = spin("videoFrames", 0, 4096, tr("Frames sampled from each video (fps x length, capped)"));
    auto *size = new QHBoxLayout;
    size->addWidget(m_imageHeight);
    size->addWidget(new QLabel(QStringLiteral("×"), this));
    size->addWidget(m_imageWidth);
    auto *video = new QHBoxLayout;
    video->addWidget(m_videos);
    video->addWidget(new QLabel(tr("of"), this));
    video->addWidget(m_frames);
    video->addWidget(new QLabel(tr("frames"), this));
    m_tower = new QCheckBox(tr("Train the vision tower"), this);
    m_tower->setObjectName(QStringLiteral("trainVisionTower"));
    m_projector = new QCheckBox(tr("Train the projector"), this);
    m_projector->setObjectName(QStringLiteral("trainProjector"));
    m_language = new QCheckBox(tr("Train the language model"), this);
    m_language->setObjectName(QStringLiteral("trainLanguageModel"));
    for (QCheckBox *c : {m_tower, m_projector, m_language})
        c->setToolTip(tr("LLaMA-Factory's freeze_vision_tower, freeze_multi_modal_projector, freeze_language_model "
                         "(by default only the language model trains); LoRA adapts the parts that train"));
    m_tokens = new QLabel(this);
    m_tokens->setObjectName(QStringLiteral("visionTokens"));
    m_tokens->setWordWrap(true);
    m_tokens->setTextFormat(Qt::PlainText);
    form->addRow(tr("Images"), m_images);
    form->addRow(tr("Image size"), size);
    form->addRow(tr("Max pixels"), m_maxPixels);
    form->addRow(tr("Videos"), video);
    form->addRow(QString(), m_tower);
    form->addRow(QString(), m_projector);
    form->addRow(QString(), m_language);
    form->addRow(m_tokens);

    const auto onSpin = [this](QSpinBox *s, const QString &what, int64_t TrainingConfig::Vision::*field) {
        connect(s, qOverload<int>(&QSpinBox::valueChanged), this,
                [this, what, field](int v) { edit(what, [&](TrainingConfig::Vision &x) { x.*field = v; }); });
    };
    onSpin(m_images, tr("Images"), &TrainingConfig::Vision::images);
    onSpin(m_imageHeight, tr("Image size"), &TrainingConfig::Vision::imageHeight);
    onSpin(m_imageWidth, tr("Image size"), &TrainingConfig::Vision::imageWidth);
    onSpin(m_maxPixels, tr("Max pixels"), &TrainingConfig::Vision::maxPixels);
    onSpin(m_videos, tr("Videos"), &TrainingConfig::Vision::videos);
    onSpin(m_frames, tr("Video frames"), &TrainingConfig::Vision::videoFrames);
    const auto onCheck = [this](QCheckBox *c, bool TrainingConfig::Vision::*field) {
        connect(c, &QCheckBox::toggled, this,
                [this, c, field](bool on) { edit(c->text(), [&](TrainingConfig::Vision &x) { x.*field = on; }); });
    };
    onCheck(m_tower, &TrainingConfig::Vision::trainTower);
    onCheck(m_projector, &TrainingConfig::Vision::trainProjector);
    onCheck(m_language, &TrainingConfig::Vision::trainLanguage);
    sync();
}

QSpinBox *VisionBox::spin(const char *name, int lo, int hi, const QString &tip)
{
    auto *s = new QSpinBox(this);
    s->setObjectName(QLatin1String(name));
    s->setRange(lo, hi);
    s->setToolTip(tip);
    return s;
}

void VisionBox::edit(const QString &what, const std::function<void(TrainingConfig::Vision &)> &change)
{
    Scenario s = m_session->scenario();
    change(s.config.vision);
    if (s.config.vision.videos > 0 && s.config.vision.videoFrames == 0)
        s.config.vision.videoFrames = 16; // a video has frames: the box starts it at 16
    m_session->applyScenario(s, tr("Change %1").arg(what), sender());
}

void VisionBox::sync()
{
    const Scenario &s = m_session->scenario();
    const auto &v = s.config.vision;
    setVisible(familyTraitsOrLlama(s.model.modelType).visionLanguage);
    const QList<QObject *> all = {m_images, m_imageHeight, m_imageWidth, m_maxPixels, m_videos, m_frames,
                                  m_tower, m_projector, m_language};
    std::vector<std::unique_ptr<QSignalBlocker>> blocks;
    for (QObject *o : all)
        blocks.push_back(std::make_unique<QSignalBlocker>(o));
    m_images->setValue(static_cast<int>(v.images));
    m_imageHeight->setValue(static_cast<int>(v.imageHeight));
    m_imageWidth->setValue(static_cast<int>(v.imageWidth));
    m_maxPixels->setValue(static_cast<int>(v.maxPixels));
    m_videos->setValue(static_cast<int>(v.videos));
    m_frames->setValue(static_cast<int>(v.videoFrames));
    m_frames->setEnabled(v.videos > 0);
    m_tower->setChecked(v.trainTower);
    m_projector->setChecked(v.trainProjector);
    m_language->setChecked(v.trainLanguage);
    const bool video = s.model.vision.video;
    m_videos->setEnabled(video);
    try {
        const VisionTokens t = visionTokens(s.model, s.config);
        m_tokens->setText(!v.any() ? tr("No images: a text-only step through the whole checkpoint")
                          : tr("%1 tokens an image%2; %3 of the %4 tokens of each sample")
                                .arg(t.imageTokens)
                                .arg(v.videos > 0 ? tr(", %1 a video").arg(t.videoTokens) : QString())
                                .arg(t.perSample)
                                .arg(s.config.seqLen));
    } catch (const InputError &e) {
        m_tokens->setText(qs(e.what()));
    }
}
