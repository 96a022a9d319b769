#pragma once
// The explorer's transport for Hugging Face Hub ids: Qt Network, one blocking GET in the calling
// thread (a worker thread, or main() before the window shows), as hub::resolve wants it.
#include "headroom/hub.h"

#include <QString>

#include <functional>
#include <optional>

class QObject;

namespace headroom {
hub::Fetch qtFetch();

// A preset id, a config.json path or a Hub id (cache, then Hub), for `--model` and the model
// field. Throws InputError. `notes` gets the Hub's notes (the parameter cross-check).
ModelArch resolveModelText(const std::string &text, const std::string &field, std::vector<std::string> *notes = nullptr);

// resolveModelText off the GUI thread (the Hub may take seconds); `done` runs on the GUI thread,
// with the model or the one-line reason, unless `receiver` is gone by then. Nothing escapes.
struct ModelLookup
{
    std::optional<ModelArch> model;
    std::vector<std::string> notes;
    QString error;
};
void lookUpModel(QObject *receiver, const std::string &text, const std::string &field,
                 std::function<void(const ModelLookup &)> done);
} // namespace headroom
