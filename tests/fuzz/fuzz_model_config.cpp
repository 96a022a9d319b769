// config.json (and Headroom's preset form) as `--model FILE` and the explorer's import read it.
#include "fuzz.h"
#include "headroom/model.h"
#include "headroom/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const nlohmann::json j = headroom::parseUntrusted(text, "model");
        headroom::ModelArch m = headroom::modelArchFromJson(j);
        if (m.estimable) {
            m.validate();
            (void)headroom::parameterCount(m);
        }
    });
}
