#pragma once

#include "session.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSlider;
class QSpinBox;
class VisionBox;

// Every knob of the scenario. Each control edits its one field of the session's scenario at
// once; the panel follows the session when undo, a recommendation or a sheet changes it.
class ConfigPanel : public QWidget
{
    Q_OBJECT
public:
    explicit ConfigPanel(Session *session, QWidget *parent = nullptr);

    // Adds an imported model to the list and selects it (undoable).
    void addImportedModel(const headroom::ModelArch &m);
    // Adds a model to the list without selecting it (a training config's import selects it with
    // the rest of the scenario, in one undo step).
    void rememberModel(const headroom::ModelArch &m) { modelIndex(m); }
    // A Hugging Face id (typed, or named by an imported training config): looked up off the GUI
    // thread (a preset, the cache, then the Hub), then selected like an imported config.json.
    void lookUpHubModel(const QString &id);
    // Lines shown under the controls (a Hub cross-check, what an import did not use).
    void showNotes(const QStringList &notes);

signals:
    void importConfigRequested();

private:
    void syncFromSession();
    void applyUnits();
    void edit(const std::function<void(headroom::Scenario &)> &change);
    QString fieldLabel(QObject *control) const;
    int modelIndex(const headroom::ModelArch &m);
    void updateVisibility();

    Session *m_session;
    std::vector<headroom::ModelArch> m_models;
    QComboBox *m_model;
    QLabel *m_modelInfo;
    QComboBox *m_precision;
    QComboBox *m_optimizer;
    QComboBox *m_optimizerImpl;
    QComboBox *m_finetune;
    QComboBox *m_objective; // issue 29: SFT, or DPO with its reference
    QSpinBox *m_loraRank;
    QLineEdit *m_loraTargets;
    QCheckBox *m_doubleQuant;
    QComboBox *m_attention;
    QCheckBox *m_checkpointing;
    QSpinBox *m_checkpointLayers; // selective checkpointing: the first N layers (0: all)
    QCheckBox *m_fusedLoss;
    QCheckBox *m_activationOffload;
    QSlider *m_batchSlider;
    QSpinBox *m_batch;
    QSlider *m_seqSlider;
    QSpinBox *m_seq;
    QSpinBox *m_prompt; // issue 29: the prompt's tokens of each sequence (0: half), post-training modes
    QSpinBox *m_gradAccum;
    QComboBox *m_gpu;
    QDoubleSpinBox *m_capacity; // the custom card's memory, in the chosen units (object name customGiB)
    QSpinBox *m_gpuCount;
    QComboBox *m_zero;
    QCheckBox *m_offload;
    QSpinBox *m_reserve;
    QLineEdit *m_allocConf;
    QLabel *m_problem;
    QLabel *m_notes;
    VisionBox *m_vision; // issue 30: shown for a vision-language checkpoint
    QList<QWidget *> m_loraOnly;
    QString m_hubLookup; // the id being looked up, empty when none
};
