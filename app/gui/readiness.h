#pragma once

#include "headroom/config.h"
#include "headroom/model.h"

#include <QString>
#include <QStringList>

// Issue 31 item 5: what "Measure now" can do on this machine, found before it is pressed: the
// probe, its LibTorch engine, an NVIDIA GPU, and a Python with torch / Transformers / PEFT for
// the transformers engine. check() runs the interpreter once (a few hundred ms): call it off the
// GUI thread.
struct ProbeReadiness
{
    bool checked = false;
    QString probe;         // path; empty: not found
    bool libtorch = false; // headroom-probe-torch.so beside it (or where the package puts it)
    bool gpu = false;      // the NVIDIA driver is loaded (/proc/driver/nvidia/version)
    QString python;        // the interpreter the transformers engine would use
    QString pythonError;   // it could not be run
    QString torch, transformers, peft; // installed versions; empty: absent

    static ProbeReadiness check(const QString &probePath, const QString &python);

    // For this model and configuration: the engine Measure now would use ("libtorch" or
    // "transformers") and, when it cannot run here, the one reason and what to install (empty
    // when it can).
    struct Plan
    {
        QString engine;
        QString blocker;
        QString summary; // one line for the bar: the engine, the device, the versions
        QString detail;  // with the interpreter and why this engine, for the tooltip
    };
    Plan plan(const headroom::ModelArch &model, const headroom::TrainingConfig &config, const QString &engineSetting,
              const QString &device) const;
};
