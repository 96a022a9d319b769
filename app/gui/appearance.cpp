#include "appearance.h"

#include "headroom/sheet.h"

#include <QApplication>

#include <algorithm>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

using headroom::Fit;

namespace appearance {

namespace {
struct Desktop
{
    bool captured = false;
    QPalette palette;
    QString style;
};
Desktop &desktop()
{
    static Desktop d;
    return d;
}

bool darkPalette(const QPalette &p)
{
    return p.color(QPalette::Window).lightness() < 128;
}

QPalette dark()
{
    QPalette p;
    const QColor window(0x2b, 0x2d, 0x30), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6), disabled(0x80, 0x80, 0x80);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, QColor(0x26, 0x28, 0x2b));
    p.setColor(QPalette::ToolTipBase, QColor(0x3c, 0x3f, 0x41));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, QColor(0x9a, 0x9a, 0x9a));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(0x35, 0x37, 0x3b));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x6b));
    p.setColor(QPalette::Light, QColor(0x45, 0x47, 0x4b));
    p.setColor(QPalette::Midlight, QColor(0x3a, 0x3c, 0x40));
    p.setColor(QPalette::Mid, QColor(0x24, 0x25, 0x28));
    p.setColor(QPalette::Dark, QColor(0x18, 0x19, 0x1b));
    p.setColor(QPalette::Shadow, Qt::black);
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7a, 0xd6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(0x6c, 0xb4, 0xff));
    p.setColor(QPalette::LinkVisited, QColor(0xb4, 0x9c, 0xff));
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, role, disabled);
    p.setColor(QPalette::Disabled, QPalette::Base, window);
    return p;
}
} // namespace

Notifier *notifier()
{
    static Notifier n;
    return &n;
}

QString name(Mode m)
{
    switch (m) {
    case Mode::System: return QStringLiteral("system");
    case Mode::Light: return QStringLiteral("light");
    case Mode::Dark: return QStringLiteral("dark");
    }
    return QStringLiteral("system");
}

std::optional<Mode> named(const QString &n)
{
    for (Mode m : {Mode::System, Mode::Light, Mode::Dark})
        if (n == name(m))
            return m;
    return std::nullopt;
}

void captureDesktop()
{
    Desktop &d = desktop();
    if (d.captured)
        return;
    d.captured = true;
    d.palette = QApplication::palette();
    d.style = QApplication::style() ? QApplication::style()->name() : QString();
}

bool desktopIsDark()
{
    captureDesktop();
    return darkPalette(desktop().palette);
}

void apply(Mode m)
{
    captureDesktop();
    const Desktop &d = desktop();
    if (m == Mode::System) {
        if (!d.style.isEmpty() && QApplication::style()->name() != d.style)
            QApplication::setStyle(QStyleFactory::create(d.style));
        QApplication::setPalette(d.palette);
        emit notifier()->changed();
        return;
    }
    if (QApplication::style()->name() != QLatin1String("fusion"))
        QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
    QApplication::setPalette(m == Mode::Dark ? dark() : QApplication::style()->standardPalette());
    emit notifier()->changed();
}

bool isDark()
{
    return darkPalette(QApplication::palette());
}

QColor fitText(Fit f)
{
    if (isDark())
        return f == Fit::Fits ? QColor(0x6f, 0xd0, 0x8c) : f == Fit::Tight ? QColor(0xf2, 0xb3, 0x4c) : QColor(0xff, 0x7b, 0x72);
    return QColor(QLatin1String(headroom::fitColor(f)));
}

QColor mutedText()
{
    return isDark() ? QColor(0x9a, 0x9a, 0x9a) : QColor(0x80, 0x80, 0x80);
}

QColor readable(const QColor &onLight)
{
    if (!isDark() || onLight.lightness() >= 150)
        return onLight;
    QColor c = onLight.toHsl();
    c.setHsl(c.hslHue(), c.hslSaturation(), std::max(170, 255 - c.lightness()));
    return c;
}

Tone bannerTone(std::optional<Fit> fit, bool error)
{
    const bool d = isDark();
    if (error)
        return d ? Tone{QStringLiteral("#4a1f1c"), QStringLiteral("#ffb4ab")} : Tone{QStringLiteral("#fde7e9"), QStringLiteral("#8c1d18")};
    if (!fit) // a trace in progress
        return d ? Tone{QStringLiteral("#1f2d44"), QStringLiteral("#b8cdf2")} : Tone{QStringLiteral("#e8eef9"), QStringLiteral("#1d3a6e")};
    switch (*fit) {
    case Fit::Fits:
        return d ? Tone{QStringLiteral("#1b3a26"), QStringLiteral("#a8e6b8")} : Tone{QStringLiteral("#e3f4e8"), QStringLiteral("#14532d")};
    case Fit::Tight:
        return d ? Tone{QStringLiteral("#45330f"), QStringLiteral("#ffd27a")} : Tone{QStringLiteral("#fff1d6"), QStringLiteral("#7a4500")};
    case Fit::OOM:
        break;
    }
    return d ? Tone{QStringLiteral("#4a1f1c"), QStringLiteral("#ffb4ab")} : Tone{QStringLiteral("#fde7e9"), QStringLiteral("#8c1d18")};
}

} // namespace appearance
