#pragma once
// Issue 31: a dark palette that follows the desktop, charts and the verdict's colours included.
// Qt 6.4 (Debian 12) has no QStyleHints::colorScheme(): "the desktop" is the palette its platform
// theme handed the application at start, dark when its window colour is.

#include "headroom/budget.h"

#include <QColor>
#include <QObject>
#include <QString>

#include <optional>

namespace appearance {

// Says when apply() changed the palette: what styles itself with a style sheet (the banner)
// does not see the application's palette events.
class Notifier : public QObject
{
    Q_OBJECT
signals:
    void changed();
};
Notifier *notifier();

enum class Mode { System, Light, Dark };
QString name(Mode m); // "system", "light", "dark" (Settings and --appearance)
std::optional<Mode> named(const QString &name);

// Remembers the desktop's palette and style; call once, before apply().
void captureDesktop();
bool desktopIsDark();
// The application's palette (and, for Light and Dark, the Fusion style that draws it evenly):
// System is the desktop's as captured.
void apply(Mode m);
bool isDark(); // the palette in use now

// A verdict's colour as text on the window (green fits, amber tight, red out of memory), lighter
// on a dark palette.
QColor fitText(headroom::Fit f);
QColor mutedText(); // what is shown but not the point (a "no" in Fits after)
// A text colour chosen for a light window, made readable on a dark one (lighter, same hue).
QColor readable(const QColor &onLight);
// The verdict banner's background and text for a fit, an error (`error`) or a trace in progress.
struct Tone
{
    QString background;
    QString text;
};
Tone bannerTone(std::optional<headroom::Fit> fit, bool error);

} // namespace appearance
