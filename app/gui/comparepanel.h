#pragma once

#include "breakdownmodel.h"
#include "session.h"

#include <QWidget>

class BreakdownChart;
class QLabel;
class QPushButton;
class QTableWidget;

// Issue 31: two configurations side by side. Pin the current one, change the other, and see both
// verdicts, both breakdowns, the difference per category and the settings that changed; the
// sheets carry the same comparison (headroom/sheet.h, Sheet::pinned).
class ComparePanel : public QWidget
{
    Q_OBJECT
public:
    explicit ComparePanel(Session *session, QWidget *parent = nullptr);
    BreakdownChart *chart();
    QTableWidget *amounts();
    QTableWidget *changes();
    QString verdicts() const; // both verdict lines, as shown
    // The two bars as a picture for sheets, brought up to date even if the tab was never shown.
    QPixmap picture(const QSize &size);

protected:
    void showEvent(QShowEvent *e) override;

private:
    void refresh();
    void ensureBody();
    bool m_dirty = true; // rebuilt when shown, not on every slider move elsewhere
    Session *m_session;
    BreakdownModel m_model;
    QPushButton *m_pin;
    QPushButton *m_unpin;
    QLabel *m_hint;
    // made by ensureBody()
    BreakdownChart *m_chart = nullptr;
    QLabel *m_pinnedVerdict = nullptr;
    QLabel *m_currentVerdict = nullptr;
    QTableWidget *m_amounts = nullptr;
    QTableWidget *m_changes = nullptr;
    QWidget *m_body = nullptr;
};
