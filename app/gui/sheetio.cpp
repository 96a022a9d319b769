#include "sheetio.h"

#include "headroom/error.h"
#include "headroom/files.h"
#include "headroom/json_input.h"
#include "headroom/serialize.h"

#include <QBuffer>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFontMetrics>
#include <QImage>
#include <QPainter>
#include <QPdfWriter>
#include <QTextDocument>
#include <QUrl>

#include <algorithm>

using namespace headroom;
using nlohmann::json;

namespace sheetio {

namespace {

constexpr qint64 kMaxFileBytes = 64 << 20;

std::string readText(const QString &path, const std::string &field)
{
    const QFileInfo fi(path);
    if (!fi.exists())
        throw InputError(field, path.toStdString(), "no such file");
    if (!fi.isFile())
        throw InputError(field, path.toStdString(), "not a regular file");
    if (fi.size() > kMaxFileBytes)
        throw InputError(field, path.toStdString(),
                         "too large (" + std::to_string(fi.size()) + " bytes; the limit is 64 MiB)");
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        throw InputError(field, path.toStdString(), "cannot be read: " + f.errorString().toStdString());
    return f.readAll().toStdString();
}

QByteArray pngBytes(const QImage &image)
{
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, "PNG");
    return bytes;
}

// The PNG export stands alone (a chat message, a slide): the chart under a header with the
// title, the configuration and the verdict.
QByteArray titledPng(const QPixmap &chart, const Sheet &sheet)
{
    const QString title = QObject::tr("GPU memory budget: %1").arg(QString::fromStdString(sheet.scenario.model.name));
    const QString config = QString::fromStdString(summarize(sheet.scenario.config)) + QStringLiteral(" · ") +
                           QString::fromStdString(sheet.scenario.gpu.name);
    const Headline headline = sheetHeadline(sheet);
    const QString verdict = QString::fromStdString(headline.text);
    QFont titleFont;
    titleFont.setPixelSize(22);
    titleFont.setBold(true);
    QFont body;
    body.setPixelSize(15);
    const int pad = 12, width = std::max(chart.width(), 640);
    const QFontMetrics tm(titleFont), bm(body);
    const QRect textArea(pad, 0, width - 2 * pad, 10000);
    const int configH = bm.boundingRect(textArea, Qt::TextWordWrap, config).height();
    const int verdictH = bm.boundingRect(textArea, Qt::TextWordWrap, verdict).height();
    const int header = pad + tm.height() + 6 + configH + 4 + verdictH + pad;
    QImage img(width, header + chart.height(), QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter p(&img);
    p.setRenderHint(QPainter::TextAntialiasing);
    int y = pad;
    p.setFont(titleFont);
    p.setPen(QColor(0x20, 0x20, 0x20));
    p.drawText(QRect(pad, y, width - 2 * pad, tm.height()), Qt::AlignLeft, title);
    y += tm.height() + 6;
    p.setFont(body);
    p.drawText(QRect(pad, y, width - 2 * pad, configH), Qt::TextWordWrap, config);
    y += configH + 4;
    p.setPen(QColor(QLatin1String(fitColor(headline.fit))));
    p.drawText(QRect(pad, y, width - 2 * pad, verdictH), Qt::TextWordWrap, verdict);
    p.drawPixmap((width - chart.width()) / 2, header, chart);
    p.end();
    return pngBytes(img);
}

} // namespace

std::optional<Format> formatFor(const QString &path)
{
    const QString ext = QFileInfo(path).suffix().toLower();
    if (ext == QLatin1String("json"))
        return Format::Json;
    if (ext == QLatin1String("html") || ext == QLatin1String("htm"))
        return Format::Html;
    if (ext == QLatin1String("md") || ext == QLatin1String("markdown"))
        return Format::Markdown;
    if (ext == QLatin1String("csv"))
        return Format::Csv;
    if (ext == QLatin1String("pdf"))
        return Format::Pdf;
    if (ext == QLatin1String("png"))
        return Format::Png;
    return std::nullopt;
}

QString filterString()
{
    return QStringLiteral("PDF (*.pdf);;HTML (*.html);;Markdown (*.md);;CSV (*.csv);;JSON sheet (*.json);;Chart image (*.png)");
}

QString writeAtomic(const QString &path, const QByteArray &bytes)
{
    // The one writer (headroom/files.h): a mkstemp temporary beside the target, renamed over it;
    // a FIFO, a device or a folder is refused, not replaced; a failure leaves the old file.
    try {
        headroom::writeFileAtomically(path.toStdString(), bytes.toStdString(), "file");
        return {};
    } catch (const headroom::InputError &e) {
        return QString::fromStdString(e.what());
    }
}

QString exportSheet(const QString &path, Format format, const Sheet &sheet, const QPixmap &chart, const QPixmap &timeline)
{
    QByteArray bytes;
    try {
        switch (format) {
        case Format::Json: bytes = QByteArray::fromStdString(toJson(sheet).dump(2) + "\n"); break;
        case Format::Markdown: bytes = QByteArray::fromStdString(sheetMarkdown(sheet)); break;
        case Format::Csv: bytes = QByteArray::fromStdString(sheetCsv(sheet)); break;
        case Format::Html: {
            const auto dataUri = [](const QPixmap &image) {
                return image.isNull() ? std::string()
                                      : "data:image/png;base64," + pngBytes(image.toImage()).toBase64().toStdString();
            };
            bytes = QByteArray::fromStdString(sheetHtml(sheet, dataUri(chart), dataUri(timeline)));
            break;
        }
        case Format::Png: bytes = titledPng(chart, sheet); break;
        case Format::Pdf: {
            QTextDocument doc;
            QBuffer buffer(&bytes);
            buffer.open(QIODevice::WriteOnly);
            QPdfWriter writer(&buffer);
            writer.setTitle(QStringLiteral("GPU memory budget: ") + QString::fromStdString(sheet.scenario.model.name));
            writer.setCreator(QStringLiteral("Headroom"));
            pdfDocument(sheet, chart, timeline, doc, writer);
            doc.print(&writer);
            break;
        }
        }
    } catch (const std::exception &e) {
        return QObject::tr("Cannot export: %1").arg(QString::fromStdString(e.what()));
    }
    if (bytes.isEmpty())
        return QObject::tr("Nothing to write to %1").arg(path);
    return writeAtomic(path, bytes);
}

void pdfDocument(const Sheet &sheet, const QPixmap &chart, const QPixmap &timeline, QTextDocument &doc, QPdfWriter &writer)
{
    // A4 with 15 mm margins, laid out in CSS pixels (96 per inch): the sheet's 640-pixel pictures
    // and its full-width tables then fit the printable width (issue 31 row 4: at the writer's own
    // 1200 dpi the document was laid out at another width, the charts ran past the right margin,
    // the tables took half the page and one configuration took five pages)
    writer.setPageSize(QPageSize(QPageSize::A4));
    writer.setPageMargins(QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter);
    writer.setResolution(96);
    const QUrl chartUrl(QStringLiteral("headroom-chart.png"));
    if (!chart.isNull())
        doc.addResource(QTextDocument::ImageResource, chartUrl, chart.toImage());
    if (!timeline.isNull())
        doc.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("headroom-timeline.png")), timeline.toImage());
    QFont font = doc.defaultFont();
    font.setPointSizeF(8);
    doc.setDefaultFont(font);
    doc.setDocumentMargin(0);
    // the page has its own margins: the screen's (2em around a 60em column) would push the
    // 640-pixel pictures past the printable width
    doc.setHtml(QString::fromStdString(sheetHtml(sheet, chart.isNull() ? std::string() : "headroom-chart.png",
                                                 timeline.isNull() ? std::string() : "headroom-timeline.png", true)));
    doc.setPageSize(writer.pageLayout().paintRectPixels(writer.resolution()).size());
}

FileKind sniff(const QString &path)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix == QLatin1String("yml") || suffix == QLatin1String("yaml"))
        return FileKind::TrainingConfig;
    json j;
    const std::string text = readText(path, "file");
    try {
        j = parseUntrusted(text, "file");
    } catch (const InputError &) {
        // JSON lines from a probe's stdout go to readMeasurement; anything else that is not JSON
        // is named as the file it is, not as a measurement (a truncated sheet was called one).
        if (text.find("\"event\"") != std::string::npos)
            return FileKind::Measurement;
        throw;
    }
    if (j.is_object() && (stringOr(j, "event") == "result" || j.contains("phases")))
        return FileKind::Measurement;
    // Anything else with a schema version is one of ours; the sheet reader says what is wrong with it.
    if (j.is_object() && (j.contains("schema_version") || j.contains("kind")) && !j.contains("model_type"))
        return FileKind::Sheet;
    // DeepSpeed's or the Trainer's JSON: what training_formats.h detects, minus config.json's keys.
    if (j.is_object() && !j.contains("model_type") &&
        (j.contains("zero_optimization") || j.contains("train_micro_batch_size_per_gpu") ||
         j.contains("per_device_train_batch_size")))
        return FileKind::TrainingConfig;
    return FileKind::ModelConfig;
}

Sheet readSheet(const QString &path)
{
    return sheetFromText(readText(path, "sheet"));
}

Measurement readMeasurement(const QString &path)
{
    const std::string text = readText(path, "measurement");
    try {
        return measurementFromJson(parseUntrusted(text, "measurement"));
    } catch (const InputError &whole) {
        // Maybe the probe's stdout: JSON lines, the result last.
        const QList<QByteArray> lines = QByteArray::fromStdString(text).trimmed().split('\n');
        if (lines.size() < 2)
            throw;
        for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
            if (it->trimmed().isEmpty())
                continue;
            json j;
            try {
                j = parseUntrusted(it->trimmed().toStdString(), "measurement");
            } catch (const InputError &) {
                throw whole;
            }
            if (stringOr(j, "event") == "result")
                return measurementFromJson(j);
            if (stringOr(j, "event") == "error")
                throw InputError("measurement", path.toStdString(),
                                 "the probe reported an error, not a result: " + stringOr(j, "message"));
        }
        throw InputError("measurement", path.toStdString(), "no {\"event\":\"result\"} line in the file");
    }
}

ModelArch readModelConfig(const QString &path)
{
    const json j = parseUntrusted(readText(path, "config.json"), "config.json");
    // A type with no modelled row imports too: the explorer traces it (Session, Note [Traced step]).
    ModelArch m = modelFromFileJsonLenient(j, QFileInfo(path).absoluteFilePath().toStdString());
    const QFileInfo fi(path);
    if (m.name.empty() || m.name == m.id) // a checkpoint's config.json is named after its folder
        m.name = (fi.fileName() == QLatin1String("config.json") ? fi.dir().dirName() : fi.completeBaseName()).toStdString();
    if (m.estimable)
        m.validate();
    return m;
}

} // namespace sheetio
