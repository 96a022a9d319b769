// A traced run (headroom-cli estimate --from-trace, the explorer's traces, the trace cache): read,
// then replayed into an estimate.
#include "fuzz.h"
#include "headroom/json_input.h"
#include "headroom/traced.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const headroom::TracedRun run = headroom::tracedRunFromJson(headroom::parseUntrusted(text, "trace"));
        (void)headroom::estimateTraced(run);
    });
}
