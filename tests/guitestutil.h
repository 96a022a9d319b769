#pragma once
// Shared by the widget tests: offscreen Qt, isolated settings, and waiting for the session.

#include "session.h"

#include <QFileInfo>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QtTest>

inline void isolateSettings()
{
    QStandardPaths::setTestModeEnabled(true); // QSettings go to ~/.qttest, never the user's
    QCoreApplication::setOrganizationName(QStringLiteral("HeadroomTests"));
    // One settings file per test program: ctest runs two at once (tst_gui and tst_sheets both
    // remember files; sharing one file, each saw the other's recent files).
    QCoreApplication::setApplicationName(QStringLiteral("headroom-tests-") +
                                         QFileInfo(QCoreApplication::applicationFilePath()).completeBaseName());
    QSettings().clear();
}

// Sanitizer builds run several times slower: the asan test preset sets HEADROOM_TEST_TIMEOUT_SCALE
// (1..100; anything else is refused loudly rather than silently ignored, as a cap once did).
inline int scaledMs(int ms)
{
    const QByteArray raw = qgetenv("HEADROOM_TEST_TIMEOUT_SCALE");
    if (raw.isEmpty())
        return ms;
    bool ok = false;
    const int k = raw.toInt(&ok);
    if (!ok || k < 1 || k > 100)
        qFatal("HEADROOM_TEST_TIMEOUT_SCALE=%s: expected a whole number from 1 to 100", raw.constData());
    return ms * k;
}

// Waits until the report for the session's latest scenario has landed.
inline bool settle(Session &s, int timeoutMs = 10000)
{
    timeoutMs = scaledMs(timeoutMs);
    QElapsedTimer t;
    t.start();
    while (s.isComputing() && t.elapsed() < timeoutMs)
        QTest::qWait(5);
    return !s.isComputing();
}

inline QString testData(const char *rel)
{
    return QStringLiteral(HEADROOM_SOURCE_DIR "/tests/data/") + QLatin1String(rel);
}
