// The CLI's transport for Hub ids: libcurl (Debian's libcurl4-openssl-dev), one blocking GET.
#include "hubfetch.h"

#ifdef HEADROOM_HAVE_CURL
#include <curl/curl.h>
#endif

#include <algorithm>
#include <cctype>

namespace headroom {

#ifdef HEADROOM_HAVE_CURL
namespace {

struct Sink
{
    hub::Response *r;
    int64_t limit;
};

size_t onBody(char *data, size_t size, size_t n, void *user)
{
    auto *s = static_cast<Sink *>(user);
    const size_t bytes = size * n;
    if (static_cast<int64_t>(s->r->body.size() + bytes) > s->limit) {
        s->r->tooLarge = true;
        return 0; // curl stops with CURLE_WRITE_ERROR
    }
    s->r->body.append(data, bytes);
    return bytes;
}

// Header lines of the response. A new status line (a 100 Continue before it) starts again.
size_t onHeader(char *data, size_t size, size_t n, void *user)
{
    auto *r = static_cast<hub::Response *>(user);
    const std::string line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {
        r->headers.clear();
        return size * n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon > 256)
        return size * n;
    std::string key = line.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
        value.pop_back();
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
        value.erase(value.begin());
    if (value.size() <= 4096)
        r->headers[key] = value;
    return size * n;
}

} // namespace

hub::Fetch curlFetch()
{
    static const bool ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    return [](const hub::Request &q) {
        hub::Response r;
        if (!ready) {
            r.transportError = "libcurl could not start";
            return r;
        }
        CURL *c = curl_easy_init();
        if (!c) {
            r.transportError = "libcurl could not start";
            return r;
        }
        Sink sink{&r, q.maxBytes > 0 ? q.maxBytes : (int64_t(64) << 20)};
        curl_slist *headers = nullptr;
        for (const auto &[k, v] : q.headers)
            headers = curl_slist_append(headers, (k + ": " + v).c_str());
        char error[CURL_ERROR_SIZE] = {0};
        curl_easy_setopt(c, CURLOPT_URL, q.url.c_str());
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        // No redirect is followed here: core's hub layer follows them for both transports, with
        // one policy for credentials (hub.cpp, fetchFollowing).
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(q.timeoutMs > 0 ? q.timeoutMs : 20000));
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
        const CURLcode rc = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        // A body cut short of its Content-Length is returned as it came: core refuses it in words
        // (and never caches it), as it does for the explorer's transport.
        if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && r.tooLarge) || (rc == CURLE_PARTIAL_FILE && status > 0)) {
            r.status = status;
        } else {
            r.timedOut = rc == CURLE_OPERATION_TIMEDOUT;
            r.transportError = error[0] ? error : curl_easy_strerror(rc);
        }
        curl_slist_free_all(headers);
        curl_easy_cleanup(c);
        return r;
    };
}
#else
hub::Fetch curlFetch()
{
    return [](const hub::Request &) {
        hub::Response r;
        r.transportError = "this headroom-cli was built without libcurl (install libcurl4-openssl-dev and rebuild)";
        return r;
    };
}
#endif

} // namespace headroom
