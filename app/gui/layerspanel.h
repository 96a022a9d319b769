#pragma once

#include "session.h"

#include "headroom/timeline.h"

#include <QWidget>

#include <optional>

class LayerChart;
class QComboBox;
class QLabel;
class QTableWidget;

// Issue 31: the activations, logits and temporaries alive at one moment of the step, by decoder
// layer and by kind of op (attention, MLP, norms, LoRA, logits), from the estimate's timeline;
// beside them by kind, a measured timeline's (the Timeline tab's overlay), which records no layers.
class LayersPanel : public QWidget
{
    Q_OBJECT
public:
    enum class Moment { StepPeak, ForwardEnd };
    explicit LayersPanel(Session *session, QWidget *parent = nullptr);
    void setMoment(Moment m);
    // A recorded run to set beside the estimate by kind (nullopt: none), and its name.
    void setMeasured(const std::optional<headroom::Timeline> &t, const QString &name);
    LayerChart *chart();
    QTableWidget *kinds();
    QString summary() const;
    QPixmap picture(const QSize &size); // for sheets, brought up to date if never shown

protected:
    void showEvent(QShowEvent *e) override;

private:
    void refresh(bool force = false);
    void ensureBody();
    Session *m_session;
    QComboBox *m_moment;
    QLabel *m_summary;
    LayerChart *m_chart = nullptr; // made by ensureBody()
    QTableWidget *m_kinds = nullptr;
    bool m_dirty = true;
    std::optional<headroom::Timeline> m_measured;
    QString m_measuredName;
};
