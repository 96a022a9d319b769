// A headroom-probe built without LibTorch: the transformers engine still measures; the LibTorch
// engine says it is absent (exit 4) instead of failing to link.
#include "probe.h"

namespace headroom::probe {

bool libtorchAvailable()
{
    return false;
}

bool cudaUsable()
{
    return false;
}

bool distributedAvailable(std::string *why)
{
    if (why)
        *why = "this headroom-probe was built without LibTorch";
    return false;
}

Outcome run(const ProbeRequest &, const Callbacks &, const Dist &)
{
    Outcome out;
    out.code = NoDevice;
    out.message = "this headroom-probe was built without LibTorch: use --engine transformers";
    return out;
}

} // namespace headroom::probe
