#include "settingsdialog.h"

#include "appearance.h"
#include "proberunner.h"
#include "settings.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>

SettingsDialog::SettingsDialog(QWidget *parent)
    : QDialog(parent)
    , m_path(new QLineEdit(this))
    , m_prefix(new QLineEdit(this))
    , m_device(new QComboBox(this))
    , m_steps(new QSpinBox(this))
    , m_timeout(new QSpinBox(this))
    , m_allocConf(new QLineEdit(this))
    , m_engine(new QComboBox(this))
    , m_python(new QLineEdit(this))
    , m_shareGpu(new QCheckBox(tr("Ranks share one GPU (Gloo), for per-rank peaks on a single card"), this))
    , m_warmWorker(new QCheckBox(tr("Keep the transformers engine's imports warm (each measurement still runs in a "
                                    "fresh process)"),
                                 this))
    , m_appearance(new QComboBox(this))
{
    setWindowTitle(tr("Headroom settings"));
    const Settings s;
    auto *form = new QFormLayout(this);
    auto *pathRow = new QHBoxLayout;
    m_path->setText(s.probePath());
    const QString found = ProbeRunner::locateProbe(QString());
    m_path->setPlaceholderText(found.isEmpty() ? tr("not found; set the path") : found);
    auto *browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("headroom-probe"));
        if (!f.isEmpty())
            m_path->setText(f);
    });
    pathRow->addWidget(m_path, 1);
    pathRow->addWidget(browse);
    form->addRow(tr("Probe executable"), pathRow);
    m_prefix->setText(s.probePrefix().join(QLatin1Char(' ')));
    m_prefix->setPlaceholderText(tr("e.g. ssh gpu-box   ·   srun --gpus=1   ·   docker exec trainer"));
    form->addRow(tr("Run through"), m_prefix);
    m_engine->addItem(tr("LibTorch — Headroom's own step, fast"), QStringLiteral("libtorch"));
    m_engine->addItem(tr("Transformers — your PyTorch + Transformers + PEFT"), QStringLiteral("transformers"));
    m_engine->setCurrentIndex(std::max(0, m_engine->findData(s.probeEngine())));
    form->addRow(tr("Engine"), m_engine);
    m_python->setText(s.probePython());
    m_python->setPlaceholderText(tr("$HEADROOM_PYTHON or python3 (e.g. ~/venvs/train/bin/python)"));
    form->addRow(tr("Python interpreter"), m_python);
    m_shareGpu->setChecked(s.probeShareGpu());
    form->addRow(QString(), m_shareGpu);
    m_warmWorker->setChecked(s.probeWarmWorker());
    m_warmWorker->setToolTip(tr("A background Python that has imported PyTorch, Transformers and PEFT, and never "
                                "touched the GPU, forks each measurement: the same peaks to the byte, several "
                                "seconds sooner. Only for a probe on this machine."));
    form->addRow(QString(), m_warmWorker);
    auto enableTransformers = [this] {
        const bool t = m_engine->currentData().toString() == QLatin1String("transformers");
        m_python->setEnabled(t);
        m_shareGpu->setEnabled(t);
    };
    connect(m_engine, &QComboBox::currentIndexChanged, this, enableTransformers);
    enableTransformers();
    form->addRow(QString(), new QLabel(tr("<small>The prefix is split into arguments (quotes group words) and never "
                                          "passed to a shell. With a prefix, the path above is the remote one.</small>"),
                                       this));
    m_device->addItem(tr("GPU if present"), QStringLiteral("auto"));
    m_device->addItem(tr("GPU (CUDA)"), QStringLiteral("cuda"));
    m_device->addItem(tr("CPU"), QStringLiteral("cpu"));
    m_device->setCurrentIndex(std::max(0, m_device->findData(s.probeDevice())));
    form->addRow(tr("Device"), m_device);
    m_steps->setRange(1, 100);
    m_steps->setValue(s.probeSteps());
    form->addRow(tr("Measured steps"), m_steps);
    m_timeout->setRange(5, 86400);
    m_timeout->setSuffix(QStringLiteral(" s"));
    m_timeout->setValue(s.probeTimeoutSeconds());
    form->addRow(tr("Timeout"), m_timeout);
    m_allocConf->setText(s.probeAllocConf());
    m_allocConf->setPlaceholderText(QStringLiteral("expandable_segments:True"));
    form->addRow(tr("PYTORCH_CUDA_ALLOC_CONF"), m_allocConf);
    m_appearance->setObjectName(QStringLiteral("appearance"));
    m_appearance->addItem(appearance::desktopIsDark() ? tr("Follow the desktop (dark)") : tr("Follow the desktop (light)"),
                          appearance::name(appearance::Mode::System));
    m_appearance->addItem(tr("Light"), appearance::name(appearance::Mode::Light));
    m_appearance->addItem(tr("Dark"), appearance::name(appearance::Mode::Dark));
    m_appearance->setCurrentIndex(std::max(0, m_appearance->findData(s.appearance())));
    form->addRow(tr("Appearance"), m_appearance);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &SettingsDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &SettingsDialog::reject);
    form->addRow(buttons);
}

void SettingsDialog::accept()
{
    Settings s;
    s.setProbePath(m_path->text().trimmed());
    s.setProbePrefix(QProcess::splitCommand(m_prefix->text()));
    s.setProbeDevice(m_device->currentData().toString());
    s.setProbeSteps(m_steps->value());
    s.setProbeTimeoutSeconds(m_timeout->value());
    s.setProbeAllocConf(m_allocConf->text().trimmed());
    s.setProbeEngine(m_engine->currentData().toString());
    s.setProbePython(m_python->text().trimmed());
    s.setProbeShareGpu(m_shareGpu->isChecked());
    s.setProbeWarmWorker(m_warmWorker->isChecked());
    const QString mode = m_appearance->currentData().toString();
    s.setAppearance(mode);
    appearance::apply(appearance::named(mode).value_or(appearance::Mode::System)); // at once, charts included
    QDialog::accept();
}
