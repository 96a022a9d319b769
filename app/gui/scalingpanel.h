#pragma once

#include "scalingmodel.h"
#include "session.h"

#include <QWidget>

class ScalingChart;

// Peak against sequence length and batch, with and without checkpointing, and the docs/seeds.md
// scaling table, copyable as Markdown.
class ScalingPanel : public QWidget
{
    Q_OBJECT
public:
    explicit ScalingPanel(Session *session, QWidget *parent = nullptr);
    ScalingModel *model() { return &m_model; }
    ScalingChart *seqChart() { return m_seqChart; }
    void copyTable();

protected:
    void showEvent(QShowEvent *e) override;

private:
    void refresh();
    bool m_dirty = true; // the charts are rebuilt when the tab is shown, not on every slider move
    Session *m_session;
    ScalingModel m_model;
    ScalingChart *m_seqChart;
    ScalingChart *m_batchChart;
};
