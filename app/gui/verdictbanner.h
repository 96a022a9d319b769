#pragma once

#include "session.h"

#include <QLabel>

// Fits / tight / OOM with the numbers, and a warning when a measurement disagrees by > 5%.
class VerdictBanner : public QLabel
{
    Q_OBJECT
public:
    explicit VerdictBanner(Session *session, QWidget *parent = nullptr);
    // The text for a report and an optional measurement; also used by --screenshot and tests.
    static QString compose(const headroom::Report &r, const headroom::Measurement *m, headroom::Unit u,
                        const headroom::Scenario &current);

private:
    void refresh();
    Session *m_session;
};
