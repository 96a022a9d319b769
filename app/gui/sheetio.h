#pragma once

#include "headroom/sheet.h"

#include <QPixmap>
#include <QString>

class QPdfWriter;
class QTextDocument;

// Files in and out. Writes are atomic (QSaveFile); reads refuse oversized, malformed or hostile
// files with an InputError that names the problem.
namespace sheetio {

enum class Format { Json, Html, Markdown, Csv, Pdf, Png };
// By extension: .json .html/.htm .md .csv .pdf .png; nullopt for anything else.
std::optional<Format> formatFor(const QString &path);
QString filterString(); // for file dialogs

// Returns an empty string on success, else the reason.
QString writeAtomic(const QString &path, const QByteArray &bytes);
// `timeline` (the Timeline tab's chart) goes into HTML and PDF after the breakdown; may be null.
QString exportSheet(const QString &path, Format format, const headroom::Sheet &sheet, const QPixmap &chart,
                    const QPixmap &timeline = {});

// The PDF's document, laid out for `writer`'s printable A4 area (the export prints it).
void pdfDocument(const headroom::Sheet &sheet, const QPixmap &chart, const QPixmap &timeline, QTextDocument &doc,
                 QPdfWriter &writer);

enum class FileKind { Sheet, Measurement, ModelConfig, TrainingConfig };
// What a dropped or opened JSON file is: a budget sheet, a probe result, or a HF config.json.
FileKind sniff(const QString &path);

headroom::Sheet readSheet(const QString &path);
// A result written by --out, or the probe's stdout saved as JSON lines (the last result wins).
headroom::Measurement readMeasurement(const QString &path);
headroom::ModelArch readModelConfig(const QString &path);

} // namespace sheetio
