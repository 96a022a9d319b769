#pragma once

#include "headroom/training_formats.h"

#include "session.h"

#include <QMainWindow>

#include <optional>

class ChartPanel;
class ComparePanel;
class ConfigPanel;
class LayersPanel;
class MeasureBar;
class MeasurementsPanel;
class RecommendationsPanel;
class ScalingPanel;
class TimelinePanel;
class VerdictBanner;
class QTabWidget;

// Assembles the panels and the menus; the work happens in the panels and the session.
class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    enum class Tab { Breakdown, Scaling, Measurements, Timeline, Compare, Layers };
    static constexpr int kTabCount = 6;
    // "breakdown", "scaling", ... as --tab names them; nullopt for another name.
    static std::optional<Tab> tabNamed(const QString &name);
    static QString tabNames(); // "breakdown, scaling, ... or compare"
    explicit MainWindow(Session *session, QWidget *parent = nullptr);

    // Open a sheet, a probe result or a HF config.json, whichever the file is. Returns the
    // problem, or an empty string.
    QString openFile(const QString &path);
    QString exportTo(const QString &path); // format by extension
    // A training config (Axolotl, LLaMA-Factory, Trainer, DeepSpeed, accelerate) as the scenario,
    // whole or not at all (issue 28): its model (a local folder or config.json at once; a Hub id
    // looked up off the GUI thread, then applied), and every setting it states; what it does not
    // state is Headroom's default, not the previous scenario's, and the notes list what that
    // changed. One undo step. Returns a problem found at once, or empty; importFinished() says
    // when it was applied or refused (a Hub lookup's refusal is reported there too).
    QString importTrainingConfig(const QString &path);
    QString exportTrainingConfig(const QString &path, headroom::TrainingFormat format);
    bool importPending() const { return !m_importing.isEmpty(); }
    void showTab(Tab t);
    Tab currentTab() const;
    QString sheetPath() const { return m_sheetPath; } // the sheet this window saves to; empty: none yet

    // Issue 31: the size a first start opens at, within the screen's available area: 1400x900
    // where it fits, else as much of the screen as leaves a margin, never below `minimum`.
    static QRect initialGeometry(const QRect &available, const QSize &minimum);
    // Opens where the window was closed (its geometry, splitters and tab, from Settings) if that
    // still lies on a screen, else at initialGeometry on the primary screen. Not for screenshots.
    void restoreWindow();
    // The splitters' states and the open tab, for Settings (restoreLayout takes it back; false
    // for bytes that are not a layout: then nothing changes).
    QByteArray saveLayout() const;
    bool restoreLayout(const QByteArray &layout);

    ChartPanel *chartPanel() { return m_chart; }
    ConfigPanel *configPanel() { return m_config; }
    MeasureBar *measureBar() { return m_measure; }
    RecommendationsPanel *recommendationsPanel() { return m_recommendations; }
    ScalingPanel *scalingPanel() { return m_scaling; }
    TimelinePanel *timelinePanel() { return m_timeline; }
    MeasurementsPanel *measurementsPanel() { return m_measurements; }
    ComparePanel *comparePanel() { return m_compare; }
    LayersPanel *layersPanel() { return m_layers; }
    VerdictBanner *verdictBanner() { return m_verdict; }

signals:
    // A training config's import ended: applied (problem empty) or refused, nothing changed.
    void importFinished(const QString &problem);

protected:
    void dragEnterEvent(QDragEnterEvent *e) override;
    void dropEvent(QDropEvent *e) override;
    void closeEvent(QCloseEvent *e) override;
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    void buildMenus();
    void openInteractively(const QString &caption, const QString &filter);
    void reportProblem(const QString &problem);
    void updateTitle();
    void remember(const QString &path); // in File > Open recent
    void fillRecentMenu();
    void saveAs();
    // The import's second half, once its model is known: the scenario built from Headroom's
    // defaults and the file's settings, applied in one step. Returns a problem, or empty.
    QString applyImport(const headroom::TrainingImport &in, const headroom::ModelArch &model, const QString &path,
                        QStringList notes);

    Session *m_session;
    ConfigPanel *m_config;
    VerdictBanner *m_verdict;
    ChartPanel *m_chart;
    MeasureBar *m_measure;
    RecommendationsPanel *m_recommendations;
    ScalingPanel *m_scaling;
    TimelinePanel *m_timeline;
    MeasurementsPanel *m_measurements;
    ComparePanel *m_compare;
    LayersPanel *m_layers;
    QTabWidget *m_tabs;
    class QSplitter *m_mainSplit = nullptr;
    class QSplitter *m_breakdownSplit = nullptr;
    QString m_sheetPath;
    QString m_importing; // a training config whose model is being looked up
    class QMenu *m_recentMenu = nullptr;
};
