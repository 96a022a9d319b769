#include "settings.h"

#include "qtutil.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QStandardPaths>

using namespace headroom;

QString Settings::probePath() const
{
    return m_settings.value(QLatin1String(kProbePath)).toString();
}

void Settings::setProbePath(const QString &path)
{
    m_settings.setValue(QLatin1String(kProbePath), path);
}

QStringList Settings::probePrefix() const
{
    return m_settings.value(QLatin1String(kProbePrefix)).toStringList();
}

void Settings::setProbePrefix(const QStringList &prefix)
{
    m_settings.setValue(QLatin1String(kProbePrefix), prefix);
}

QString Settings::probeDevice() const
{
    const QString d = m_settings.value(QLatin1String(kProbeDevice), QStringLiteral("auto")).toString();
    return d == QLatin1String("cuda") || d == QLatin1String("cpu") ? d : QStringLiteral("auto");
}

void Settings::setProbeDevice(const QString &device)
{
    m_settings.setValue(QLatin1String(kProbeDevice), device);
}

int Settings::probeSteps() const
{
    return std::clamp(m_settings.value(QLatin1String(kProbeSteps), 2).toInt(), 1, 100);
}

void Settings::setProbeSteps(int steps)
{
    m_settings.setValue(QLatin1String(kProbeSteps), steps);
}

int Settings::probeTimeoutSeconds() const
{
    return std::clamp(m_settings.value(QLatin1String(kProbeTimeout), 600).toInt(), 5, 86400);
}

void Settings::setProbeTimeoutSeconds(int seconds)
{
    m_settings.setValue(QLatin1String(kProbeTimeout), seconds);
}

QString Settings::probeAllocConf() const
{
    return m_settings.value(QLatin1String(kProbeAllocConf)).toString();
}

void Settings::setProbeAllocConf(const QString &conf)
{
    m_settings.setValue(QLatin1String(kProbeAllocConf), conf);
}

QString Settings::probeEngine() const
{
    const QString e = m_settings.value(QLatin1String(kProbeEngine)).toString();
    return e == QLatin1String("transformers") ? e : QStringLiteral("libtorch");
}

void Settings::setProbeEngine(const QString &engine)
{
    m_settings.setValue(QLatin1String(kProbeEngine), engine);
}

QString Settings::probePython() const
{
    return m_settings.value(QLatin1String(kProbePython)).toString();
}

void Settings::setProbePython(const QString &python)
{
    m_settings.setValue(QLatin1String(kProbePython), python);
}

bool Settings::probeShareGpu() const
{
    return m_settings.value(QLatin1String(kProbeShareGpu), false).toBool();
}

QString Settings::appearance() const
{
    const QString v = m_settings.value(QLatin1String(kAppearance), QStringLiteral("system")).toString();
    return v == QLatin1String("light") || v == QLatin1String("dark") ? v : QStringLiteral("system");
}

void Settings::setAppearance(const QString &mode)
{
    m_settings.setValue(QLatin1String(kAppearance), mode);
}

bool Settings::probeWarmWorker() const
{
    return m_settings.value(QLatin1String(kProbeWarmWorker), true).toBool();
}

void Settings::setProbeWarmWorker(bool warm)
{
    m_settings.setValue(QLatin1String(kProbeWarmWorker), warm);
}

void Settings::setProbeShareGpu(bool share)
{
    m_settings.setValue(QLatin1String(kProbeShareGpu), share);
}

Unit Settings::units() const
{
    return m_settings.value(QLatin1String(kUnits)).toString() == QLatin1String("GB") ? Unit::GB : Unit::GiB;
}

void Settings::setUnits(Unit u)
{
    m_settings.setValue(QLatin1String(kUnits), qs(toString(u)));
}

QString Settings::sessionPath()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/session.json");
}

std::optional<Sheet> Settings::lastSession() const
{
    QFile f(sessionPath());
    if (!f.open(QIODevice::ReadOnly) || f.size() > (64 << 20))
        return std::nullopt;
    try {
        return sheetFromText(f.readAll().toStdString());
    } catch (const std::exception &) {
        return std::nullopt; // damaged or from a newer version: start from the last scenario
    }
}

bool Settings::saveSession(const Sheet &sheet) const
{
    std::string text;
    try {
        text = toJson(sheet).dump();
    } catch (const std::exception &) {
        return false;
    }
    QDir().mkpath(QFileInfo(sessionPath()).absolutePath());
    QSaveFile f(sessionPath());
    return f.open(QIODevice::WriteOnly) &&
           f.write(text.data(), static_cast<qint64>(text.size())) == static_cast<qint64>(text.size()) && f.commit();
}

std::optional<Scenario> Settings::lastScenario() const
{
    const QByteArray text = m_settings.value(QLatin1String(kLastScenario)).toByteArray();
    if (text.isEmpty())
        return std::nullopt;
    try {
        return sheetFromText(text.toStdString()).scenario;
    } catch (const std::exception &) {
        return std::nullopt; // an older or damaged entry: start from the default
    }
}

void Settings::setLastScenario(const Scenario &s)
{
    Sheet sheet;
    sheet.scenario = s;
    try {
        m_settings.setValue(QLatin1String(kLastScenario), QByteArray::fromStdString(toJson(sheet).dump()));
    } catch (const std::exception &) {
        // a scenario that cannot be estimated is not worth restoring
    }
}

QByteArray Settings::windowGeometry() const
{
    return m_settings.value(QLatin1String(kWindowGeometry)).toByteArray();
}

void Settings::setWindowGeometry(const QByteArray &g)
{
    m_settings.setValue(QLatin1String(kWindowGeometry), g);
}

QByteArray Settings::windowLayout() const
{
    return m_settings.value(QLatin1String(kWindowLayout)).toByteArray();
}

void Settings::setWindowLayout(const QByteArray &l)
{
    m_settings.setValue(QLatin1String(kWindowLayout), l);
}

QStringList Settings::recentFiles() const
{
    QStringList out;
    for (const QString &p : m_settings.value(QLatin1String(kRecentFiles)).toStringList())
        if (!p.isEmpty() && !out.contains(p) && out.size() < kMaxRecentFiles)
            out << p;
    return out;
}

void Settings::addRecentFile(const QString &path)
{
    QStringList list = recentFiles();
    list.removeAll(path);
    list.prepend(path);
    while (list.size() > kMaxRecentFiles)
        list.removeLast();
    m_settings.setValue(QLatin1String(kRecentFiles), list);
}
