#pragma once
// Hugging Face Hub model ids ("meta-llama/Llama-3.1-8B"): the local cache first, then the Hub.
// core/ does no networking: the caller passes the transport (libcurl in the CLI, Qt Network in
// the explorer) as a function; everything else (cache layout, URLs, errors, the parameter
// cross-check) is here, in one place, for both.

#include "headroom/model.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace headroom::hub {

// What one GET asks for and what came back. Header names in `headers` are lower-case. A transport
// follows no redirect: it returns the 3xx with its Location, and hub.cpp follows the chain with
// one policy for both transports (credentials only to the request's own scheme, host and port).
struct Request
{
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers;
    int64_t maxBytes = 0; // the transport stops reading (and sets tooLarge) past this
    int timeoutMs = 0;    // the whole request, connection included
};
struct Response
{
    long status = 0;               // 0: no HTTP answer at all (see transportError)
    std::string body;
    std::map<std::string, std::string> headers;
    std::string transportError;    // DNS, connection refused, TLS: the transport's words
    bool timedOut = false;
    bool tooLarge = false;
};
using Fetch = std::function<Response(const Request &)>;

// Where and how: from the same environment variables huggingface_hub reads.
struct Settings
{
    std::vector<std::string> cacheDirs; // searched in order; the first is written to
    std::string endpoint = "https://huggingface.co";
    std::string token;                  // HF_TOKEN, or the file huggingface-cli login writes
    bool offline = false;               // HF_HUB_OFFLINE=1: the cache only
    int timeoutMs = 20000;              // HEADROOM_HUB_TIMEOUT (seconds)
};
Settings settingsFromEnvironment();

// "org/name": one slash, letters, digits, '.', '_' and '-', no "..", not a .json file name.
bool looksLikeHubId(const std::string &text);

// snapshots/<commit>/<file> for `id` in one cache directory, found through refs/main.
std::optional<std::string> cachedFile(const std::string &cacheDir, const std::string &id, const std::string &file);

struct Resolved
{
    ModelArch model;
    std::string source;             // the cached file's path, or the URL it came from
    bool fromCache = false;
    std::vector<std::string> notes; // the parameter cross-check, a cache that could not be written
};

// The model behind a Hub id: config.json from the cache, else from the Hub (then cached), and
// model.safetensors.index.json to cross-check the parameter count. `fetch` may be empty: the
// cache only. Errors are InputError(field, id, ...) in words a user can act on: gated (how to
// get access), not found, offline, timed out.
Resolved resolve(const std::string &id, const Settings &settings, const Fetch &fetch, const std::string &field = "model");

// The cross-check: the checkpoint's bytes (the index's metadata.total_size) over the bytes of
// one parameter in config.json's dtype, against Headroom's count. Empty when they agree to 1%.
std::optional<std::string> parameterCrossCheck(const ModelArch &model, const nlohmann::json &config,
                                               const nlohmann::json &index);

} // namespace headroom::hub
