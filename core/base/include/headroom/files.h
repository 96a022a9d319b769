#pragma once
// Every file Headroom reads from a path and every file it writes, through one reader and one
// writer (issue 32): what a path names is checked with fstat/lstat before a byte moves.

#include <cstddef>
#include <cstdint>
#include <string>

namespace headroom {

// A regular file's bytes, at most maxBytes: a FIFO, a device or a folder is refused by fstat
// before anything is read (nothing blocks), and the size is checked first. Throws InputError
// naming `field` and the path.
std::string readRegularFile(const std::string &path, const std::string &field, size_t maxBytes = 64u << 20);
// The same checks without the read, for a file another program reads (a snapshot the Python
// converter unpickles): a regular file, at most maxBytes; InputError naming `field` otherwise.
void requireRegularFile(const std::string &path, const std::string &field, uint64_t maxBytes);

// Writes `bytes` to `path` so that the file is either the old one or the whole new one: a new
// temporary made by mkstemp in the same folder (never a fixed name a planted symlink could hold),
// flushed, then renamed over the target. The target must be a regular file or absent; a symlink
// is followed to the file it names (the user named that file), and anything else (a FIFO, a
// device such as /dev/null, a folder, a socket) is refused, not replaced. On any failure the old
// file is unchanged and the temporary removed. Throws InputError naming `field` and the path.
void writeFileAtomically(const std::string &path, const std::string &bytes, const std::string &field);

// The check alone, for writers that have their own atomic save (Qt's QSaveFile): the path to
// write (a symlink resolved to its target), or InputError when the target is not a regular file.
std::string writableTarget(const std::string &path, const std::string &field);

// The folder of the running executable (/proc/self/exe), "." when it cannot be read: where the
// programs installed beside it (headroom-probe, the engine) are looked for first.
std::string executableDir();

// FNV-1a, 64 bits: a content hash that is the same on every build and machine (cache file names,
// golden digests); not for security.
uint64_t fnv1a64(const std::string &s);

} // namespace headroom
