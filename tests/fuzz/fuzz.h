#pragma once
// libFuzzer harnesses (tests/fuzz): each feeds one input surface the raw bytes. The contract under
// test: bad input is an InputError (a one-line message naming the field), anything else that
// escapes is a finding, and so is every ASan/UBSan report. Built by the `fuzz` preset (clang).
#include "headroom/error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace headroom::fuzz {

// Runs `body`; an InputError is the expected refusal, any other exception aborts (a finding).
template <class F>
int guarded(const uint8_t *data, size_t size, F &&body)
{
    const std::string text(reinterpret_cast<const char *>(data), size);
    try {
        body(text);
    } catch (const InputError &e) {
        const std::string msg = e.what();
        if (msg.find('\n') != std::string::npos) { // the one-line promise
            std::fprintf(stderr, "multi-line InputError: %s\n", msg.c_str());
            std::abort();
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "escaped %s\n", e.what());
        std::abort();
    }
    return 0;
}

} // namespace headroom::fuzz
