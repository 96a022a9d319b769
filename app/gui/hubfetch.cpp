#include "hubfetch.h"

#include "headroom/error.h"
#include "headroom/json_input.h"

#include "headroom/catalog.h"

#include <QEventLoop>
#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>
#include <QFileInfo>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QTimer>

namespace headroom {

hub::Fetch qtFetch()
{
    return [](const hub::Request &q) {
        hub::Response r;
        QNetworkAccessManager manager;
        QNetworkRequest request(QUrl(QString::fromStdString(q.url)));
        // No redirect is followed here: core's hub layer follows them for both transports, with
        // one policy for credentials (hub.cpp, fetchFollowing).
        request.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::ManualRedirectPolicy);
        for (const auto &[k, v] : q.headers)
            request.setRawHeader(QByteArray::fromStdString(k), QByteArray::fromStdString(v));
        QNetworkReply *reply = manager.get(request);
        QEventLoop loop;
        QTimer timer;
        timer.setSingleShot(true);
        bool timedOut = false;
        const int64_t limit = q.maxBytes > 0 ? q.maxBytes : (int64_t(64) << 20);
        QObject::connect(&timer, &QTimer::timeout, &loop, [&] {
            timedOut = true;
            reply->abort();
        });
        QObject::connect(reply, &QNetworkReply::readyRead, &loop, [&] {
            r.body += reply->readAll().toStdString();
            if (static_cast<int64_t>(r.body.size()) > limit) {
                r.tooLarge = true;
                reply->abort();
            }
        });
        QObject::connect(reply, &QNetworkReply::finished, &loop, &QEventLoop::quit);
        timer.start(q.timeoutMs > 0 ? q.timeoutMs : 20000);
        if (!reply->isFinished())
            loop.exec();
        if (!r.tooLarge)
            r.body += reply->readAll().toStdString();
        const QVariant status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute);
        if (timedOut) {
            r.timedOut = true;
        } else if (status.isValid()) {
            r.status = status.toInt();
            for (const auto &[k, v] : reply->rawHeaderPairs())
                r.headers[k.toLower().toStdString()] = v.toStdString();
        } else {
            r.transportError = reply->errorString().toStdString();
        }
        if (r.tooLarge && r.status == 0)
            r.status = 200;
        delete reply;
        return r;
    };
}

ModelArch resolveModelText(const std::string &text, const std::string &field, std::vector<std::string> *notes)
{
    if (!QFileInfo::exists(QString::fromStdString(text)) && hub::looksLikeHubId(text)) {
        hub::Resolved r = hub::resolve(text, hub::settingsFromEnvironment(), qtFetch(), field);
        if (notes)
            *notes = r.notes;
        return r.model;
    }
    // A config.json whose type has no modelled row opens too: the explorer traces it.
    const QFileInfo fi(QString::fromStdString(text));
    if (fi.isFile() && fi.suffix() == QLatin1String("json")) {
        try {
            return resolveModel(text, field);
        } catch (const InputError &e) {
            if (e.field() != "config.model_type")
                throw;
            return modelFromFileJsonLenient(readJsonFile(text, field), fi.absoluteFilePath().toStdString());
        }
    }
    return resolveModel(text, field);
}

void lookUpModel(QObject *receiver, const std::string &text, const std::string &field,
                 std::function<void(const ModelLookup &)> done)
{
    auto *watcher = new QFutureWatcher<ModelLookup>(receiver);
    QObject::connect(watcher, &QFutureWatcher<ModelLookup>::finished, receiver, [watcher, done = std::move(done)] {
        watcher->deleteLater();
        done(watcher->result());
    });
    // Nothing escapes the worker: QFutureWatcher would rethrow it on the GUI thread.
    watcher->setFuture(QtConcurrent::run([text, field] {
        ModelLookup f;
        try {
            f.model = resolveModelText(text, field, &f.notes);
        } catch (const std::exception &e) {
            f.error = QString::fromUtf8(e.what());
        }
        return f;
    }));
}

} // namespace headroom
