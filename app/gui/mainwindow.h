#pragma once

#include "headroom/training_formats.h"

#include "session.h"

#include <QMainWindow>

class ChartPanel;
class ConfigPanel;
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
    enum class Tab { Breakdown, Scaling, Measurements, Timeline };
    explicit MainWindow(Session *session, QWidget *parent = nullptr);

    // Open a sheet, a probe result or a HF config.json, whichever the file is. Returns the
    // problem, or an empty string.
    QString openFile(const QString &path);
    QString exportTo(const QString &path); // format by extension
    // A training config (Axolotl, LLaMA-Factory, Trainer, DeepSpeed, accelerate) onto the scenario,
    // undoable; its model is looked up like a typed Hub id. Returns a problem, or empty.
    QString importTrainingConfig(const QString &path);
    QString exportTrainingConfig(const QString &path, headroom::TrainingFormat format);
    void showTab(Tab t);

    ChartPanel *chartPanel() { return m_chart; }
    ConfigPanel *configPanel() { return m_config; }
    MeasureBar *measureBar() { return m_measure; }
    RecommendationsPanel *recommendationsPanel() { return m_recommendations; }
    ScalingPanel *scalingPanel() { return m_scaling; }
    TimelinePanel *timelinePanel() { return m_timeline; }
    MeasurementsPanel *measurementsPanel() { return m_measurements; }
    VerdictBanner *verdictBanner() { return m_verdict; }

protected:
    void dragEnterEvent(QDragEnterEvent *e) override;
    void dropEvent(QDropEvent *e) override;
    void closeEvent(QCloseEvent *e) override;

private:
    void buildMenus();
    void openInteractively(const QString &caption, const QString &filter);
    void reportProblem(const QString &problem);
    void updateTitle();

    Session *m_session;
    ConfigPanel *m_config;
    VerdictBanner *m_verdict;
    ChartPanel *m_chart;
    MeasureBar *m_measure;
    RecommendationsPanel *m_recommendations;
    ScalingPanel *m_scaling;
    TimelinePanel *m_timeline;
    MeasurementsPanel *m_measurements;
    QTabWidget *m_tabs;
    QString m_sheetPath;
};
