#pragma once

#include "headroom/sheet.h"

#include <QSettings>
#include <QStringList>

#include <optional>

// Every persisted setting, with its key in one place (docs/style.md point 14).
class Settings
{
public:
    static constexpr const char *kProbePath = "probe/path";
    static constexpr const char *kProbePrefix = "probe/prefix";
    static constexpr const char *kProbeDevice = "probe/device";
    static constexpr const char *kProbeSteps = "probe/steps";
    static constexpr const char *kProbeTimeout = "probe/timeout_s";
    static constexpr const char *kProbeAllocConf = "probe/alloc_conf";
    static constexpr const char *kProbeEngine = "probe/engine";
    static constexpr const char *kProbePython = "probe/python";
    static constexpr const char *kProbeShareGpu = "probe/share_gpu";
    static constexpr const char *kProbeWarmWorker = "probe/warm_worker";
    static constexpr const char *kUnits = "ui/units";
    static constexpr const char *kAppearance = "ui/appearance"; // system | light | dark
    static constexpr const char *kLastScenario = "session/last_scenario";
    static constexpr const char *kWindowGeometry = "ui/window_geometry";
    static constexpr const char *kWindowLayout = "ui/window_layout"; // splitters and the open tab
    static constexpr const char *kRecentFiles = "ui/recent_files";
    static constexpr int kMaxRecentFiles = 8;

    QString probePath() const;      // empty: find it (see ProbeRunner::locateProbe)
    void setProbePath(const QString &path);
    // A launcher to run the probe through, e.g. {"ssh", "gpu-box"}: an argument list, never a shell string.
    QStringList probePrefix() const;
    void setProbePrefix(const QStringList &prefix);
    QString probeDevice() const; // auto | cuda | cpu
    void setProbeDevice(const QString &device);
    int probeSteps() const;
    void setProbeSteps(int steps);
    int probeTimeoutSeconds() const;
    void setProbeTimeoutSeconds(int seconds);
    QString probeAllocConf() const;
    void setProbeAllocConf(const QString &conf);
    // libtorch (Headroom's own step) | transformers (the user's PyTorch + Transformers + PEFT).
    QString probeEngine() const;
    void setProbeEngine(const QString &engine);
    QString probePython() const; // the transformers engine's interpreter; empty: $HEADROOM_PYTHON or python3
    void setProbePython(const QString &python);
    bool probeShareGpu() const; // several ranks on one GPU (Gloo) with the transformers engine
    void setProbeShareGpu(bool share);
    // A warm transformers-engine worker (Note [Warm worker]): imports once, each run still a
    // fresh process of its own. Default on.
    bool probeWarmWorker() const;
    void setProbeWarmWorker(bool warm);

    // The window as it was closed (QWidget::saveGeometry), and its splitters and tab
    // (MainWindow::saveLayout); empty when never saved.
    // Issue 31: the palette, following the desktop unless set; an unknown value is "system".
    QString appearance() const;
    void setAppearance(const QString &mode);

    QByteArray windowGeometry() const;
    void setWindowGeometry(const QByteArray &g);
    QByteArray windowLayout() const;
    void setWindowLayout(const QByteArray &l);

    // Sheets, results and configs opened or saved, the latest first, at most kMaxRecentFiles.
    QStringList recentFiles() const;
    void addRecentFile(const QString &path);

    headroom::Unit units() const;
    void setUnits(headroom::Unit u);

    // The last configuration, as a sheet without measurements; nullopt if absent or unreadable.
    std::optional<headroom::Scenario> lastScenario() const;
    void setLastScenario(const headroom::Scenario &s);
    // The whole session (scenario and measurements) kept across restarts: a sheet in the app's
    // data folder, written atomically when the window closes. Empty when there is none or it is
    // damaged (then lastScenario() still applies).
    static QString sessionPath();
    std::optional<headroom::Sheet> lastSession() const;
    bool saveSession(const headroom::Sheet &sheet) const; // false (old file kept) when the write fails

private:
    mutable QSettings m_settings;
};
