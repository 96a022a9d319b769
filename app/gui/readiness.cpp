#include "readiness.h"

#include "headroom/support.h"

#include <QDir>
#include <QFileInfo>
#include <QProcess>

using namespace headroom;

ProbeReadiness ProbeReadiness::check(const QString &probePath, const QString &python)
{
    ProbeReadiness r;
    r.checked = true;
    r.probe = probePath;
    if (!probePath.isEmpty()) {
        const QDir dir = QFileInfo(probePath).dir();
        r.libtorch = QFileInfo::exists(dir.filePath(QStringLiteral("headroom-probe-torch.so"))) ||
                     QFileInfo::exists(dir.filePath(QStringLiteral("../lib/headroom/headroom-probe-torch.so")));
    }
    r.gpu = QFileInfo::exists(QStringLiteral("/proc/driver/nvidia/version"));
    r.python = python.isEmpty() ? qEnvironmentVariable("HEADROOM_PYTHON", QStringLiteral("python3")) : python;
    // the installed versions without importing anything (importing torch takes seconds)
    QProcess p;
    p.start(r.python, {QStringLiteral("-c"),
                       QStringLiteral("import importlib.metadata as m\n"
                                      "for n in ('torch', 'transformers', 'peft'):\n"
                                      "    try: print(n, m.version(n))\n"
                                      "    except Exception: print(n, '')\n")});
    if (!p.waitForStarted(5000)) {
        r.pythonError = QStringLiteral("%1 not found").arg(r.python);
        return r;
    }
    if (!p.waitForFinished(10000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        p.kill();
        r.pythonError = QStringLiteral("%1 did not answer").arg(r.python);
        return r;
    }
    const QString out = QString::fromUtf8(p.readAllStandardOutput().left(4096));
    for (const QString &line : out.split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
        const QStringList kv = line.split(QLatin1Char(' '));
        const QString v = kv.size() > 1 ? kv.at(1).trimmed().left(40) : QString();
        if (kv.at(0) == QLatin1String("torch"))
            r.torch = v;
        else if (kv.at(0) == QLatin1String("transformers"))
            r.transformers = v;
        else if (kv.at(0) == QLatin1String("peft"))
            r.peft = v;
    }
    return r;
}

ProbeReadiness::Plan ProbeReadiness::plan(const ModelArch &model, const TrainingConfig &config, const QString &engineSetting,
                                          const QString &device) const
{
    Plan p;
    if (!checked) {
        p.summary = QStringLiteral("checking what this machine can measure…");
        return p;
    }
    if (probe.isEmpty()) {
        p.blocker = QStringLiteral("headroom-probe was not found: set its path in Settings or $HEADROOM_PROBE");
        return p;
    }
    const QString name = QString::fromStdString(model.name);
    const auto refusal = libtorchRefusal(model, config);
    const bool wantTransformers = engineSetting == QLatin1String("transformers") || refusal.has_value() || !libtorch;
    p.engine = wantTransformers ? QStringLiteral("transformers") : QStringLiteral("libtorch");
    QString why;
    if (engineSetting != QLatin1String("transformers")) {
        if (refusal)
            why = QStringLiteral("the LibTorch engine does not reproduce %1 = %2").arg(QString::fromStdString(refusal->field),
                                                                                    QString::fromStdString(refusal->value));
        else if (!libtorch)
            why = QStringLiteral("this probe was built without its LibTorch engine");
    }
    const QString where = device == QLatin1String("cpu") ? QStringLiteral("on the CPU")
                          : gpu                          ? QStringLiteral("on the GPU")
                          : device == QLatin1String("cuda") ? QString()
                                                            : QStringLiteral("on the CPU (no NVIDIA GPU found)");
    if (device == QLatin1String("cuda") && !gpu) {
        p.blocker = QStringLiteral("no NVIDIA GPU found on this machine (no driver loaded): choose CPU, or measure on a machine with one");
        return p;
    }
    if (wantTransformers) {
        QStringList missing;
        if (!pythonError.isEmpty()) {
            p.blocker = QStringLiteral("measuring %1 needs the transformers engine%2, and %3 (set the interpreter in Settings "
                                       "or $HEADROOM_PYTHON)")
                            .arg(name, why.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(why), pythonError);
            return p;
        }
        if (torch.isEmpty())
            missing << QStringLiteral("torch");
        if (transformers.isEmpty())
            missing << QStringLiteral("transformers");
        if (peft.isEmpty() && config.finetune != FineTune::Full)
            missing << QStringLiteral("peft");
        if (!missing.isEmpty()) {
            p.blocker = QStringLiteral("measuring %1 needs the transformers engine%2, and %3 has no %4: pip install %5")
                            .arg(name, why.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(why), python,
                                 missing.join(QStringLiteral(", ")), missing.join(QLatin1Char(' ')));
            return p;
        }
        // one line in the bar; why this engine is in the detail (the button's tooltip)
        p.summary = QStringLiteral("transformers engine, %1 (torch %2, transformers %3%4)")
                        .arg(where, torch, transformers, peft.isEmpty() ? QString() : QStringLiteral(", peft %1").arg(peft));
        p.detail = QStringLiteral("Measure now uses the %1, with %2%3.")
                       .arg(p.summary, python, why.isEmpty() ? QString() : QStringLiteral("; %1").arg(why));
    } else {
        p.summary = QStringLiteral("LibTorch engine, %1").arg(where);
        p.detail = QStringLiteral("Measure now uses the %1: Headroom's own step, which answers in seconds.").arg(p.summary);
    }
    return p;
}
