#pragma once
// Every line headroom-cli prints with words that came from outside (a file's keys and values, an
// engine's error text, a Hub's note, CLI11's echo of an argument) goes through here: control
// characters escaped (no terminal escape, no forged second line), one line, bounded (issue 32,
// row 7).
#include "headroom/error.h"

#include <cstdio>
#include <string>

namespace headroom::cli {

inline void say(std::FILE *to, const char *prefix, const std::string &text)
{
    std::fprintf(to, "%s%s\n", prefix, oneLineValue(text, 4000).c_str());
}

} // namespace headroom::cli
