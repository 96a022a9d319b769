// headroom: the desktop explorer. `headroom --screenshot FILE.png` renders the window offscreen
// and exits, for docs and tests.

#include "chartpanel.h"
#include "hubfetch.h"
#include "appearance.h"
#include "mainwindow.h"
#include "sheetio.h"
#include "timelinepanel.h"
#include "session.h"
#include "settings.h"

#include "headroom/catalog.h"
#include "headroom/config.h"

#include <QApplication>
#include <QBuffer>
#include <QElapsedTimer>
#include <QCommandLineParser>
#include <QIcon>
#include <QTimer>

#include <cstdio>
#include <cstring>

using namespace headroom;

namespace {

int fail(const QString &message)
{
    std::fprintf(stderr, "headroom: %s\n", qPrintable(message));
    return 2;
}

// --screenshot: the window at `size` offscreen, once everything it shows has landed, as a PNG.
int shoot(MainWindow &window, Session &session, const QString &size, const QString &file)
{
    const QStringList wh = size.split(QLatin1Char('x'));
    const int w = wh.size() == 2 ? wh[0].toInt() : 0, h = wh.size() == 2 ? wh[1].toInt() : 0;
    if (w < 320 || h < 240 || w > 8000 || h > 8000)
        return fail(QStringLiteral("--size = %1: must be WxH between 320x240 and 8000x8000").arg(size));
    window.resize(w, h);
    window.show();
    session.recomputeNow();
    // A model with no row is traced in the background: the picture waits for it (10 min at most).
    QElapsedTimer waited;
    waited.start();
    while (!session.traceStatus().isEmpty() && waited.elapsed() < 600000)
        QCoreApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents, 100);
    // Lay out and paint: a label that wraps to more lines at its final width asks for another
    // layout pass (MeasureBar::fitStatus), so a few rounds.
    for (int round = 0; round < 4; ++round)
        QCoreApplication::processEvents();
    // Encoded in memory, then written through the same atomic save as sheets: a failed write
    // keeps the old file (issue 15: the screenshot was written in place).
    QByteArray png;
    QBuffer buffer(&png);
    if (!buffer.open(QIODevice::WriteOnly) || !window.grab().save(&buffer, "PNG"))
        return fail(QStringLiteral("--screenshot = %1: cannot encode the image").arg(file));
    if (const QString problem = sheetio::writeAtomic(file, png); !problem.isEmpty())
        return fail(QStringLiteral("--screenshot = %1: %2").arg(file, problem));
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    // A screenshot, --help and --version need no display; choose the offscreen platform before Qt
    // picks one. Without one, a window cannot open: say so in one line (Qt would abort).
    bool needsDisplay = true;
    for (int i = 1; i < argc; ++i)
        for (const char *flag : {"--screenshot", "--help", "-h", "--help-all", "--version", "-v"})
            if (std::strcmp(argv[i], flag) == 0)
                needsDisplay = false;
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        if (!needsDisplay)
            qputenv("QT_QPA_PLATFORM", "offscreen");
        else if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY"))
            return fail(QStringLiteral("no display: DISPLAY and WAYLAND_DISPLAY are unset; run it in a desktop session "
                                       "(or over ssh -X), or use headroom-cli"));
    }

    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Headroom"));
    QApplication::setApplicationName(QStringLiteral("headroom"));
    QApplication::setApplicationVersion(QStringLiteral(HEADROOM_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Headroom: how much GPU memory a training run needs, estimated and measured."));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("Render the window to FILE.png and exit."),
                                        QStringLiteral("FILE.png"));
    const QCommandLineOption model(QStringLiteral("model"), QStringLiteral("Model preset id or config.json path."),
                                   QStringLiteral("ID"));
    const QCommandLineOption gpu(QStringLiteral("gpu"), QStringLiteral("GPU id from the catalog (see headroom-cli gpus)."),
                                 QStringLiteral("ID"));
    const QCommandLineOption config(QStringLiteral("config"),
                                    QStringLiteral("Open a budget sheet (or a config.json) at start."), QStringLiteral("sheet.json"));
    const QCommandLineOption measurement(QStringLiteral("measurement"),
                                         QStringLiteral("Import a probe result (may be repeated)."), QStringLiteral("result.json"));
    const QCommandLineOption tab(QStringLiteral("tab"), QStringLiteral("breakdown | scaling | measurements | timeline | compare | layers"),
                                 QStringLiteral("TAB"), QStringLiteral("breakdown"));
    const QCommandLineOption view(QStringLiteral("view"), QStringLiteral("step | phases (the breakdown chart)"),
                                  QStringLiteral("VIEW"), QStringLiteral("step"));
    const QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size for --screenshot, e.g. 1400x900."),
                                  QStringLiteral("WxH"), QStringLiteral("1400x900"));
    const QCommandLineOption timeline(QStringLiteral("timeline"),
                                      QStringLiteral("Overlay a measured timeline (headroom-probe --timeline) on the Timeline tab."),
                                      QStringLiteral("timeline.json"));
    const QCommandLineOption look(QStringLiteral("appearance"),
                                  QStringLiteral("system | light | dark (default: Settings; light for --screenshot)."),
                                  QStringLiteral("MODE"));
    const QCommandLineOption pin(QStringLiteral("pin"),
                                 QStringLiteral("Open a sheet or a training config and pin it for the Compare tab, "
                                                "before --config and the rest apply."),
                                 QStringLiteral("FILE"));
    parser.addOptions({screenshot, model, gpu, config, measurement, tab, view, size, timeline, look, pin});
    parser.process(app);

    Session session;
    const bool shooting = parser.isSet(screenshot);
    // The palette before any window: the desktop's unless Settings or --appearance say otherwise;
    // a screenshot is reproducible, light unless asked.
    appearance::captureDesktop();
    const QString mode = parser.isSet(look) ? parser.value(look)
                         : shooting         ? appearance::name(appearance::Mode::Light)
                                            : Settings().appearance();
    if (const auto m = appearance::named(mode))
        appearance::apply(*m);
    else
        return fail(QStringLiteral("--appearance = %1: must be system, light or dark").arg(mode));
    if (!shooting) { // screenshots are reproducible: they never depend on the last session
        const Settings settings;
        if (const auto sheet = settings.lastSession())
            session.restore(*sheet); // scenario and measurements, as the window left them
        else if (const auto last = settings.lastScenario())
            session.setScenario(*last);
        session.setUnits(settings.units());
    }
    MainWindow window(&session);
    try {
        Scenario s = session.scenario();
        if (parser.isSet(model)) {
            const ModelArch previous = s.model;
            s.model = resolveModelText(parser.value(model).toStdString(), "--model");
            s.config.lora.targets = loraTargetsOnSwitch(previous, s.model, s.config.lora.targets);
            s.config.seqLen = seqLenFor(s.model, s.config.seqLen);
            s.config.attention = attentionFor(s.model, s.config.attention);
        }
        if (parser.isSet(gpu))
            s.gpu = findGpu(parser.value(gpu).toStdString(), "--gpu");
        session.setScenario(s);
    } catch (const std::exception &e) {
        return fail(QString::fromUtf8(e.what()));
    }
    QString importProblem;
    QObject::connect(&window, &MainWindow::importFinished, &window, [&](const QString &p) { importProblem = p; });
    // Opens a file, and waits for a training config naming a Hub id to be applied once its model
    // is found (issue 28: the picture never shows one model's name with another's numbers); two
    // minutes at most. Returns the problem, or empty.
    const auto open = [&](const QString &path) -> QString {
        importProblem.clear();
        if (const QString problem = window.openFile(path); !problem.isEmpty())
            return problem;
        QElapsedTimer looking;
        looking.start();
        while (window.importPending() && looking.elapsed() < 120000)
            QCoreApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents, 100);
        if (window.importPending())
            return QStringLiteral("%1: its model was not found within two minutes").arg(path);
        return importProblem;
    };
    if (parser.isSet(pin)) {
        if (const QString problem = open(parser.value(pin)); !problem.isEmpty())
            return fail(QStringLiteral("--pin: %1").arg(problem));
        session.pin();
    }
    for (const QString &path : parser.values(config) + parser.values(measurement))
        if (const QString problem = open(path); !problem.isEmpty())
            return fail(problem);
    if (parser.isSet(timeline))
        if (const QString problem = window.timelinePanel()->openMeasured(parser.value(timeline)); !problem.isEmpty())
            return fail(QStringLiteral("--timeline: %1").arg(problem));
    const QString tabName = parser.value(tab);
    const std::optional<MainWindow::Tab> named = MainWindow::tabNamed(tabName);
    if (!named)
        return fail(QStringLiteral("--tab = %1: must be %2").arg(tabName, MainWindow::tabNames()));
    const MainWindow::Tab shownTab = *named;
    window.showTab(shownTab);
    if (parser.value(view) == QLatin1String("phases"))
        window.chartPanel()->setView(BreakdownModel::View::Phases);
    else if (parser.value(view) != QLatin1String("step"))
        return fail(QStringLiteral("--view = %1: must be step or phases").arg(parser.value(view)));

    if (shooting)
        return shoot(window, session, parser.value(size), parser.value(screenshot));
    window.restoreWindow();
    if (parser.isSet(tab)) // asked for on the command line: over the remembered one
        window.showTab(shownTab);
    window.show();
    return QApplication::exec();
}
