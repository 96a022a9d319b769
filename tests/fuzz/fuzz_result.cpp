// A probe result (--out, an imported measurement, `compare`).
#include "fuzz.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const headroom::Measurement m = headroom::measurementFromJson(headroom::parseUntrusted(text, "result"));
        (void)headroom::rankSpread(m);
        (void)headroom::toJson(m).dump();
    });
}
