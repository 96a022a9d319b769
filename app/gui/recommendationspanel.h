#pragma once

#include "recommendationmodel.h"
#include "session.h"

#include <QWidget>

class QTableView;

// The ordered fixes; applying one is undoable.
class RecommendationsPanel : public QWidget
{
    Q_OBJECT
public:
    explicit RecommendationsPanel(Session *session, QWidget *parent = nullptr);
    RecommendationModel *model() { return &m_model; }
    void apply(int row);

private:
    Session *m_session;
    RecommendationModel m_model;
    QTableView *m_view;
};
