#pragma once
// The explorer's transport for Hugging Face Hub ids: Qt Network, one blocking GET in the calling
// thread (a worker thread, or main() before the window shows), as hub::resolve wants it.
#include "headroom/hub.h"

#include <QString>

namespace headroom {
hub::Fetch qtFetch();

// A preset id, a config.json path or a Hub id (cache, then Hub), for `--model` and the model
// field. Throws InputError. `notes` gets the Hub's notes (the parameter cross-check).
ModelArch resolveModelText(const std::string &text, const std::string &field, std::vector<std::string> *notes = nullptr);
} // namespace headroom
