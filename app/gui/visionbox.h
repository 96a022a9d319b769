#pragma once

#include "session.h"

#include <QGroupBox>

#include <functional>

class QCheckBox;
class QLabel;
class QSpinBox;

// Issue 30: a vision-language checkpoint's pixels per sample and which of its parts train
// (TrainingConfig::Vision; Note [Vision inputs]). Shown only for a checkpoint with a vision tower
// (FamilyTraits::visionLanguage); each control edits its one field, undoably.
class VisionBox : public QGroupBox
{
    Q_OBJECT
public:
    explicit VisionBox(Session *session, QWidget *parent = nullptr);
    // The session's scenario into the controls (no edits), and whether the box shows.
    void sync();

private:
    void edit(const QString &what, const std::function<void(headroom::TrainingConfig::Vision &)> &change);
    QSpinBox *spin(const char *name, int lo, int hi, const QString &tip);

    Session *m_session;
    QSpinBox *m_images, *m_imageHeight, *m_imageWidth, *m_maxPixels, *m_videos, *m_frames;
    QCheckBox *m_tower, *m_projector, *m_language;
    QLabel *m_tokens; // what the processor makes of them, or why not
};
