#pragma once

#include <QDialog>

class QLineEdit;
class QSpinBox;
class QComboBox;
class QCheckBox;

// Where and how the probe runs: a local path, or a launcher prefix such as `ssh gpu-box`.
class SettingsDialog : public QDialog
{
    Q_OBJECT
public:
    explicit SettingsDialog(QWidget *parent = nullptr);
    void accept() override;

private:
    QLineEdit *m_path;
    QLineEdit *m_prefix;
    QComboBox *m_device;
    QSpinBox *m_steps;
    QSpinBox *m_timeout;
    QLineEdit *m_allocConf;
    QComboBox *m_engine;
    QLineEdit *m_python;
    QCheckBox *m_shareGpu;
    QCheckBox *m_warmWorker;
    QComboBox *m_appearance;
};
