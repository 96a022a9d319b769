#include "headroom/files.h"

#include "headroom/error.h"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace headroom {

namespace {
// Opened without blocking (a FIFO's open waits for a writer), then refused unless fstat says it is
// a regular file (a FIFO, a device such as /dev/zero, a directory), and its size checked before a
// byte is read. Returns the open descriptor, owned by `f`.
int openRegular(const std::string &path, const std::string &field, size_t maxBytes,
                std::unique_ptr<FILE, int (*)(FILE *)> &f)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        throw InputError(field, path, std::string("cannot open the file (") + std::strerror(errno) + ")");
    f.reset(::fdopen(fd, "rb"));
    if (!f) {
        ::close(fd);
        throw InputError(field, path, "cannot open the file");
    }
    struct stat st
    {
    };
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        throw InputError(field, path, S_ISDIR(st.st_mode) ? "is a folder, not a file"
                                                          : "is not a regular file (a pipe, a device or a socket): not read");
    if (static_cast<uint64_t>(st.st_size) > maxBytes)
        throw InputError(field, path, "too large (" + std::to_string(st.st_size) + " bytes; the limit is " +
                                          std::to_string(maxBytes) + ")");
    return fd;
}
} // namespace

void requireRegularFile(const std::string &path, const std::string &field, uint64_t maxBytes)
{
    std::unique_ptr<FILE, int (*)(FILE *)> f(nullptr, &std::fclose);
    openRegular(path, field, static_cast<size_t>(std::min<uint64_t>(maxBytes, SIZE_MAX)), f);
}

std::string readRegularFile(const std::string &path, const std::string &field, size_t maxBytes)
{
    // The read itself stops at the limit too (a file that grows).
    std::unique_ptr<FILE, int (*)(FILE *)> f(nullptr, &std::fclose);
    const int fd = openRegular(path, field, maxBytes, f);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::string text;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
        text.append(buf, n);
        if (text.size() > maxBytes)
            throw InputError(field, path, "too large (the limit is " + std::to_string(maxBytes) + " bytes)");
    }
    if (std::ferror(f.get()))
        throw InputError(field, path, "cannot read the file");
    return text;
}

std::string writableTarget(const std::string &path, const std::string &field)
{
    if (path.empty())
        throw InputError(field, path, "needs a file name");
    std::string target = path;
    struct stat st
    {
    };
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        // The file the link names (which may not exist yet: its folder must).
        char buf[PATH_MAX];
        const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
        if (n <= 0)
            throw InputError(field, path, "is a symbolic link that cannot be read");
        buf[n] = '\0';
        const std::string link(buf);
        const size_t slash = path.find_last_of('/');
        target = link.front() == '/' || slash == std::string::npos ? link : path.substr(0, slash + 1) + link;
    }
    if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw InputError(field, path, S_ISDIR(st.st_mode) ? "is a folder: name a file"
                                                          : "is not a regular file (a pipe, a device or a socket): "
                                                            "not replaced");
    return target;
}

void writeFileAtomically(const std::string &path, const std::string &bytes, const std::string &field)
{
    const std::string target = writableTarget(path, field);
    const size_t slash = target.find_last_of('/');
    const std::string folder = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
    std::string tmpl = folder + "/.headroom-XXXXXX";
    const int fd = ::mkstemp(tmpl.data()); // O_CREAT | O_EXCL: never an existing file or a link
    if (fd < 0)
        throw InputError(field, path, std::string("cannot write there (") + std::strerror(errno) + ")");
    bool ok = true;
    int err = 0;
    for (size_t done = 0; ok && done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = false;
            err = errno;
        } else {
            done += static_cast<size_t>(n);
        }
    }
    // The mode a new file gets (mkstemp makes 0600), or the old file's.
    struct stat old
    {
    };
    const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : [] {
        const mode_t mask = ::umask(0);
        ::umask(mask);
        return static_cast<mode_t>(0666 & ~mask);
    }();
    if (ok && (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0)) {
        ok = false;
        err = errno;
    }
    if (::close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && ::rename(tmpl.c_str(), target.c_str()) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        ::unlink(tmpl.c_str());
        throw InputError(field, path, std::string("the file could not be written (") + std::strerror(err ? err : EIO) +
                                          "); any earlier file is unchanged");
    }
}

std::string executableDir()
{
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return ".";
    buf[n] = '\0';
    return std::filesystem::path(buf).parent_path().string();
}

uint64_t fnv1a64(const std::string &s)
{
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

} // namespace headroom
