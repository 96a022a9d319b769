// A probe request (headroom-probe --request).
#include "fuzz.h"
#include "headroom/measurement.h"
#include "headroom/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const headroom::ProbeRequest r = headroom::probeRequestFromJson(headroom::parseUntrusted(text, "request"));
        (void)headroom::toJson(r).dump();
    });
}
