#pragma once

#include "session.h"

#include "headroom/timeline.h"

#include <QWidget>

#include <optional>

class QLabel;
class TimelineChart;

// Memory over one steady training step (issue 12): the estimate's allocation stream stacked by
// category, phase bands, a measured timeline (headroom-probe --timeline, or the engine's) drawn
// over it phase by phase, and, under the mouse, the largest live tensors with their op.
class TimelinePanel : public QWidget
{
    Q_OBJECT
public:
    explicit TimelinePanel(Session *session, QWidget *parent = nullptr);
    // Loads a probe_timeline JSON, or converts a PyTorch memory snapshot (.pickle) through the
    // engine's converter, to overlay; "" on success, else the one-line reason.
    QString openMeasured(const QString &path);
    TimelineChart *chart() { return m_chart; }
    const std::optional<headroom::Timeline> &measured() const { return m_measured; }
    QString measuredName() const { return m_measuredName; }
    QString details() const;
    // The chart as a picture for sheets, brought up to date even if the tab was never shown.
    QPixmap picture(const QSize &size);
    void showDetailsAt(double x);

signals:
    void measuredChanged(); // a measured timeline was opened

protected:
    void showEvent(QShowEvent *e) override;

private:
    void refresh(bool force = false);
    void chooseFile();
    QString convertSnapshot(const QString &path, const QString &out);

    Session *m_session;
    TimelineChart *m_chart;
    QLabel *m_source;
    QLabel *m_details;
    bool m_dirty = true;
    headroom::Timeline m_estimate;
    size_t m_first = 0; // the steady step's first event in m_estimate
    std::optional<headroom::Timeline> m_measured;
    QString m_measuredName;
};
