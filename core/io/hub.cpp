#include "headroom/hub.h"

#include "headroom/catalog.h"
#include "headroom/config.h"
#include "headroom/error.h"
#include "headroom/serialize.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <unistd.h>

namespace fs = std::filesystem;

namespace headroom::hub {
namespace {

constexpr int64_t kConfigLimit = 4 << 20;  // a config.json is a few KiB; a 4 MiB one is not a config
constexpr int64_t kIndexLimit = 32 << 20;  // the largest indexes (DeepSeek-V3) are ~9 MiB

std::string env(const char *name)
{
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

std::string lowercase(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool truthy(const std::string &v)
{
    const std::string l = lowercase(v);
    return l == "1" || l == "true" || l == "yes" || l == "on";
}

// A small file that may be absent (nothing then): the token, a ref. Through the one reader, so a
// FIFO or a device there (HF_TOKEN_PATH=/dev/stdin) is refused instead of read or waited on.
std::string readSmallFile(const std::string &path, size_t limit, const std::string &field = "cache")
{
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec)) || ec)
        return {};
    return readRegularFile(path, field, limit);
}

std::string trim(std::string s)
{
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
        ++i;
    return s.substr(i);
}

// models--org--name, as huggingface_hub names a model's folder in the cache.
std::string repoFolder(const std::string &id)
{
    std::string f = "models--";
    for (char c : id)
        f += c == '/' ? std::string("--") : std::string(1, c);
    return f;
}

bool isHex(const std::string &s)
{
    return !s.empty() && s.size() <= 64 &&
           std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

// An ETag as the Hub sends it: "abc", W/"abc". Only hex survives (it names a file).
std::string cleanEtag(std::string e)
{
    if (e.rfind("W/", 0) == 0)
        e = e.substr(2);
    e.erase(std::remove(e.begin(), e.end(), '"'), e.end());
    return isHex(e) ? e : std::string();
}

std::string header(const Response &r, const std::string &name)
{
    const auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string() : trim(it->second);
}

// Writes `bytes` to `path` through the one writer (headroom/files.h): a reader never sees half.
bool writeAtomically(const fs::path &path, const std::string &bytes)
{
    try {
        writeFileAtomically(path.string(), bytes, "cache");
        return true;
    } catch (const InputError &) {
        return false;
    }
}

// Stores a downloaded file the way huggingface_hub does: blobs/<etag>, a relative symlink from
// snapshots/<commit>/<file>, refs/main = <commit>. Python's huggingface_hub and the next run of
// Headroom then find it offline. Returns what went wrong, or empty.
std::string storeInCache(const std::string &cacheDir, const std::string &id, const std::string &file,
                         const Response &r)
{
    const std::string commit = header(r, "x-repo-commit");
    if (!isHex(commit))
        return "the Hub's answer had no X-Repo-Commit header";
    std::string etag = cleanEtag(header(r, "x-linked-etag"));
    if (etag.empty())
        etag = cleanEtag(header(r, "etag"));
    const fs::path repo = fs::path(cacheDir) / repoFolder(id);
    std::error_code ec;
    fs::create_directories(repo / "refs", ec);
    fs::create_directories(repo / "snapshots" / commit, ec);
    if (!etag.empty())
        fs::create_directories(repo / "blobs", ec);
    if (ec)
        return "cannot create " + repo.string() + " (" + ec.message() + ")";
    const fs::path snap = repo / "snapshots" / commit / file;
    if (!etag.empty()) {
        if (!writeAtomically(repo / "blobs" / etag, r.body))
            return "cannot write " + (repo / "blobs" / etag).string();
        fs::remove(snap, ec);
        fs::create_symlink(fs::path("../../blobs") / etag, snap, ec);
        if (ec)
            return "cannot link " + snap.string() + " (" + ec.message() + ")";
    } else if (!writeAtomically(snap, r.body)) {
        return "cannot write " + snap.string();
    }
    if (!writeAtomically(repo / "refs" / "main", commit))
        return "cannot write " + (repo / "refs" / "main").string();
    return {};
}

std::string seconds(int ms)
{
    std::ostringstream o;
    o << (ms + 500) / 1000 << " s";
    return o.str();
}

// An absolute URL's parts: scheme, host and port (the scheme's default when none is given), and
// what follows them. False when `url` is not http:// or https://.
struct Origin
{
    std::string scheme, authority, host, port, rest;
};
bool parseOrigin(const std::string &url, Origin &o)
{
    const size_t sep = url.find("://");
    if (sep == std::string::npos)
        return false;
    o.scheme = lowercase(url.substr(0, sep));
    if (o.scheme != "http" && o.scheme != "https")
        return false;
    const size_t start = sep + 3, slash = url.find_first_of("/?#", start);
    std::string authority = url.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    o.rest = slash == std::string::npos ? "/" : url.substr(slash);
    o.authority = authority;
    if (const size_t at = authority.rfind('@'); at != std::string::npos)
        authority = authority.substr(at + 1); // user:password@ is not part of the origin
    const size_t close = authority.rfind(']'), colon = authority.rfind(':');
    if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
        o.host = authority.substr(0, colon);
        o.port = authority.substr(colon + 1);
    } else {
        o.host = authority;
    }
    o.host = lowercase(o.host);
    if (o.port.empty())
        o.port = o.scheme == "https" ? "443" : "80";
    return !o.host.empty();
}

// One GET with the Hub's redirects (renamed repos, LFS files) followed here, for both transports
// (they follow none): at most 10, http and https only, never from https down to http, and the
// Authorization header only while scheme, host and port stay the request's own (issue 32, row 1:
// Qt's redirect policy kept it for another host or port). X-Repo-Commit and X-Linked-Etag are
// kept from whichever response carried them; the time limit covers the whole chain.
Response fetchFollowing(Request q, const Fetch &fetch, const std::string &field, const std::string &id)
{
    Origin first;
    if (!parseOrigin(q.url, first))
        throw InputError(field, id, "the Hub endpoint " + q.url.substr(0, 80) + " is not an http:// or https:// URL");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(q.timeoutMs > 0 ? q.timeoutMs : 20000);
    std::map<std::string, std::string> kept;
    for (int hop = 0;; ++hop) {
        Response r = fetch(q);
        for (const char *k : {"x-repo-commit", "x-linked-etag"}) {
            if (r.headers.count(k))
                kept[k] = r.headers[k];
            else if (kept.count(k))
                r.headers[k] = kept[k];
        }
        const bool redirect = r.status == 301 || r.status == 302 || r.status == 303 || r.status == 307 || r.status == 308;
        if (!redirect)
            return r;
        std::string location = header(r, "location");
        if (location.empty())
            return r; // a 3xx without a Location: reported as the status it is
        if (hop >= 10)
            throw InputError(field, id, "the Hub redirected more than 10 times (a redirect loop?); last to " +
                                            location.substr(0, 80));
        Origin cur, next;
        parseOrigin(q.url, cur);
        if (location.rfind("//", 0) == 0)
            location = cur.scheme + ":" + location;
        else if (location[0] == '/')
            location = cur.scheme + "://" + cur.authority + location;
        else if (location.find("://") == std::string::npos) // relative to the current path
            location = cur.scheme + "://" + cur.authority + cur.rest.substr(0, cur.rest.rfind('/') + 1) + location;
        if (!parseOrigin(location, next))
            throw InputError(field, id, "the Hub redirected to " + location.substr(0, 80) +
                                            ", which is not an http:// or https:// URL; not followed");
        if (cur.scheme == "https" && next.scheme == "http")
            throw InputError(field, id, "the Hub redirected from https to plain http (" + location.substr(0, 80) +
                                            "); not followed");
        const bool sameOrigin = next.scheme == first.scheme && next.host == first.host && next.port == first.port;
        if (!sameOrigin)
            q.headers.erase(std::remove_if(q.headers.begin(), q.headers.end(),
                                           [](const auto &h) {
                                               const std::string k = lowercase(h.first);
                                               return k == "authorization" || k == "cookie";
                                           }),
                            q.headers.end());
        q.url = location;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            Response t;
            t.timedOut = true;
            return t;
        }
        q.timeoutMs = static_cast<int>(left.count());
    }
}

// One GET from the Hub; a non-200 answer becomes an InputError in words a user can act on.
// 404 on `optional` returns nullopt instead.
std::optional<Response> get(const std::string &id, const std::string &file, const Settings &s, const Fetch &fetch,
                            int64_t limit, const std::string &field, bool optional)
{
    Request q;
    q.url = s.endpoint + "/" + id + "/resolve/main/" + file;
    q.maxBytes = limit;
    q.timeoutMs = s.timeoutMs;
    q.headers.push_back({"User-Agent", "headroom/" HEADROOM_VERSION});
    if (!s.token.empty())
        q.headers.push_back({"Authorization", "Bearer " + s.token});
    Response r = fetchFollowing(q, fetch, field, id);
    const std::string page = s.endpoint + "/" + id;
    const std::string cache = s.cacheDirs.empty() ? std::string("none") : s.cacheDirs.front();
    if (r.status == 0) {
        if (r.timedOut)
            throw InputError(field, id,
                             "the Hub (" + s.endpoint + ") did not answer within " + seconds(s.timeoutMs) +
                                 "; raise HEADROOM_HUB_TIMEOUT (seconds), or set HF_HUB_OFFLINE=1 to use the cache only");
        throw InputError(field, id,
                         "not in the Hugging Face cache (" + cache + ") and the Hub cannot be reached (" +
                             (r.transportError.empty() ? std::string("no answer") : r.transportError) +
                             "); download it once online, or pass the path of its config.json");
    }
    if (r.tooLarge)
        throw InputError(field, id, file + " from the Hub is larger than " + std::to_string(limit >> 20) + " MiB");
    switch (r.status) {
    case 200:
        // A body shorter (or longer) than its Content-Length is a broken download, never cached
        // (issue 32, row 13: the explorer's transport reported none).
        if (const std::string cl = header(r, "content-length"); !cl.empty()) {
            char *end = nullptr;
            const unsigned long long n = std::strtoull(cl.c_str(), &end, 10);
            if (end == cl.c_str() || *end != '\0' || n != r.body.size())
                throw InputError(field, id,
                                 file + " from the Hub was cut short (Content-Length " + cl.substr(0, 20) + ", " +
                                     std::to_string(r.body.size()) + " bytes received); try again");
        }
        return r;
    case 401:
        if (s.token.empty())
            throw InputError(field, id,
                             "the model is gated or private: accept its terms at " + page +
                                 ", then set HF_TOKEN to a read token from https://huggingface.co/settings/tokens "
                                 "(or run `huggingface-cli login`)");
        throw InputError(field, id, "the Hub refused the token in HF_TOKEN (HTTP 401: invalid or expired); make a new "
                                    "read token at https://huggingface.co/settings/tokens");
    case 403:
        throw InputError(field, id,
                         "the model is gated and this token's account has no access yet (HTTP 403); request access at " +
                             page + " and wait for approval");
    case 404:
        if (optional)
            return std::nullopt;
        throw InputError(field, id,
                         "no such model on the Hub (" + page + " answered 404); check the spelling" +
                             (s.token.empty() ? std::string(", and set HF_TOKEN if it is private") : std::string()));
    case 429:
        throw InputError(field, id, "the Hub is rate-limiting this address (HTTP 429); wait a minute, or set HF_TOKEN");
    default:
        throw InputError(field, id,
                         "the Hub answered HTTP " + std::to_string(r.status) + " for " + file + "; try again later");
    }
}

double dtypeBytes(const nlohmann::json &config)
{
    std::string d;
    for (const char *k : {"torch_dtype", "dtype"})
        if (config.contains(k) && config[k].is_string())
            d = config[k].get<std::string>();
    if (d == "float32")
        return 4;
    if (d == "bfloat16" || d == "float16")
        return 2;
    if (d == "float8_e4m3fn" || d == "float8_e5m2")
        return 1;
    return 0;
}

} // namespace

Settings settingsFromEnvironment()
{
    Settings s;
    std::string home = env("HF_HOME");
    if (home.empty()) {
        const std::string xdg = env("XDG_CACHE_HOME");
        home = (xdg.empty() ? env("HOME") + "/.cache" : xdg) + "/huggingface";
    }
    std::string cache = env("HF_HUB_CACHE");
    if (cache.empty())
        cache = env("HUGGINGFACE_HUB_CACHE");
    if (cache.empty())
        cache = home + "/hub";
    s.cacheDirs.push_back(cache);
    const std::string endpoint = env("HF_ENDPOINT");
    if (!endpoint.empty()) {
        s.endpoint = endpoint;
        while (!s.endpoint.empty() && s.endpoint.back() == '/')
            s.endpoint.pop_back();
    }
    s.token = env("HF_TOKEN");
    if (s.token.empty())
        s.token = env("HUGGING_FACE_HUB_TOKEN");
    if (s.token.empty()) {
        const std::string path = env("HF_TOKEN_PATH").empty() ? home + "/token" : env("HF_TOKEN_PATH");
        s.token = trim(readSmallFile(path, 4096, "HF_TOKEN_PATH"));
    }
    s.token = trim(s.token);
    s.offline = truthy(env("HF_HUB_OFFLINE")) || truthy(env("TRANSFORMERS_OFFLINE"));
    const std::string t = env("HEADROOM_HUB_TIMEOUT");
    if (!t.empty()) {
        char *end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        // At least a millisecond: a smaller value rounded to 0 ms, which libcurl reads as its own
        // default (issue 32, row 14).
        if (end == t.c_str() || *end != '\0' || !(v >= 0.001 && v <= 3600))
            throw InputError("HEADROOM_HUB_TIMEOUT", t, "must be a number of seconds in [0.001, 3600]");
        s.timeoutMs = static_cast<int>(std::lround(v * 1000));
    }
    return s;
}

bool looksLikeHubId(const std::string &text)
{
    const size_t slash = text.find('/');
    if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos || text.size() > 200)
        return false;
    // huggingface_hub's validate_repo_id: no ".." and no "--" (the cache folder joins owner and
    // name with "--", so "a--b/c" and "a/b--c" would share models--a--b--c: issue 32, row 17), and
    // each part begins and ends with a letter, digit or underscore.
    if (text.find("..") != std::string::npos || text.find("--") != std::string::npos ||
        (text.size() >= 5 && text.compare(text.size() - 5, 5, ".json") == 0))
        return false;
    auto part = [](const std::string &p) {
        auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        if (p.empty() || p.size() > 96 || !std::isalnum(static_cast<unsigned char>(p.front())) || !word(p.back()))
            return false;
        return std::all_of(p.begin(), p.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        });
    };
    return part(text.substr(0, slash)) && part(text.substr(slash + 1));
}

std::optional<std::string> cachedFile(const std::string &cacheDir, const std::string &id, const std::string &file)
{
    const fs::path repo = fs::path(cacheDir) / repoFolder(id);
    const std::string commit = trim(readSmallFile((repo / "refs" / "main").string(), 128));
    if (!isHex(commit))
        return std::nullopt;
    const fs::path p = repo / "snapshots" / commit / file;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) // follows the blob symlink
        return std::nullopt;
    return p.string();
}

std::optional<std::string> parameterCrossCheck(const ModelArch &model, const nlohmann::json &config,
                                               const nlohmann::json &index)
{
    if (!index.is_object() || !index.contains("metadata") || !index["metadata"].is_object())
        return std::nullopt;
    const auto &md = index["metadata"];
    if (!md.contains("total_size") || !md["total_size"].is_number())
        return std::nullopt;
    const double bytes = md["total_size"].get<double>();
    const double per = dtypeBytes(config);
    const int64_t ours = model.estimable ? parameterCount(model) : 0;
    if (!(bytes > 0) || per == 0 || ours <= 0)
        return std::nullopt;
    const double theirs = bytes / per;
    const double diff = (static_cast<double>(ours) - theirs) / theirs;
    if (std::abs(diff) <= 0.01)
        return std::nullopt;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "the checkpoint's index holds %.3f B parameters (%.0f bytes of %s); Headroom counts %.3f B from "
                  "config.json (%+.1f%%): a quantized or mixed-dtype checkpoint, or a module Headroom does not model",
                  theirs / 1e9, bytes, per == 4 ? "float32" : per == 2 ? "16-bit" : "8-bit", ours / 1e9, 100 * diff);
    return std::string(buf);
}

Resolved resolve(const std::string &id, const Settings &s, const Fetch &fetch, const std::string &field)
{
    if (!looksLikeHubId(id))
        throw InputError(field, id, "is not a Hugging Face model id (org/name) nor a file");
    Resolved out;
    // A built-in preset made from this id (resources/models/*.json keep the config.json verbatim):
    // no cache, no network.
    for (const auto &p : modelPresets()) {
        bool named = !p.source.empty() && lowercase(p.source) == lowercase(id);
        for (const std::string &a : p.alsoSources)
            named = named || lowercase(a) == lowercase(id);
        if (named) {
            out.model = p;
            out.source = "built-in preset " + p.id + (lowercase(p.source) == lowercase(id) ? "" : " (the same model as " + p.source + ")");
            out.fromCache = true;
            return out;
        }
    }
    auto build = [&](const nlohmann::json &config) {
        try {
            out.model = modelFromHfConfig(config, id);
            out.model.source = id;
        } catch (const InputError &e) {
            throw InputError(field, id, std::string("its config.json: ") + e.what());
        }
    };
    for (const auto &dir : s.cacheDirs) {
        if (const auto path = cachedFile(dir, id, "config.json")) {
            const nlohmann::json config = readJsonFile(*path, field, kConfigLimit);
            build(config);
            out.source = *path;
            out.fromCache = true;
            if (const auto idx = cachedFile(dir, id, "model.safetensors.index.json"))
                if (auto note = parameterCrossCheck(out.model, config, readJsonFile(*idx, field, kIndexLimit)))
                    out.notes.push_back(*note);
            return out;
        }
    }
    if (s.offline || !fetch)
        throw InputError(field, id,
                         "not in the Hugging Face cache (" + (s.cacheDirs.empty() ? std::string("none") : s.cacheDirs.front()) +
                             ")" + (s.offline ? " and HF_HUB_OFFLINE is set" : "") +
                             "; download it once online, or pass the path of its config.json");
    const Response r = *get(id, "config.json", s, fetch, kConfigLimit, field, false);
    const nlohmann::json config = parseUntrusted(r.body, id + " config.json", kConfigLimit);
    build(config);
    out.source = s.endpoint + "/" + id + "/resolve/main/config.json";
    if (!s.cacheDirs.empty()) {
        const std::string why = storeInCache(s.cacheDirs.front(), id, "config.json", r);
        if (!why.empty())
            out.notes.push_back("not cached: " + why);
    }
    // The index is a cross-check, never a reason to fail: a single-file checkpoint has none (404).
    try {
        if (const auto idx = get(id, "model.safetensors.index.json", s, fetch, kIndexLimit, field, true)) {
            if (auto note = parameterCrossCheck(out.model, config, parseUntrusted(idx->body, id + " index", kIndexLimit)))
                out.notes.push_back(*note);
            if (!s.cacheDirs.empty())
                storeInCache(s.cacheDirs.front(), id, "model.safetensors.index.json", *idx);
        }
    } catch (const InputError &e) {
        out.notes.push_back(std::string("parameter count not cross-checked: ") + e.why());
    }
    return out;
}

} // namespace headroom::hub
