#include "headroom/error.h"

#include <algorithm>
#include <cstdio>

namespace headroom {

std::string oneLineValue(const std::string &s, size_t limit)
{
    std::string out;
    out.reserve(std::min(s.size(), limit) + 8);
    size_t shown = 0;
    for (unsigned char c : s) {
        if (shown >= limit && (c & 0xC0) != 0x80) { // never inside a UTF-8 sequence
            out += "...";
            break;
        }
        if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else
            out += static_cast<char>(c);
        ++shown;
    }
    return out;
}

int64_t checkedMul(int64_t a, int64_t b)
{
    int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        throw InputError("size", std::to_string(a) + " x " + std::to_string(b), "byte count overflows 64 bits");
    return r;
}

int64_t checkedAdd(int64_t a, int64_t b)
{
    int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r))
        throw InputError("size", std::to_string(a) + " + " + std::to_string(b), "byte count overflows 64 bits");
    return r;
}

} // namespace headroom
