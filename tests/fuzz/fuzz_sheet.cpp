// A budget sheet (File → Open, --config).
#include "fuzz.h"
#include "headroom/sheet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) { (void)headroom::sheetFromText(text); });
}
