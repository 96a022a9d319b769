// One line of a probe's stdout, as the explorer's runner, the CLI and the launcher read it. It never
// throws: every problem is Line::Kind::Malformed or NotProtocol.
#include "fuzz.h"
#include "headroom/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const auto line = headroom::protocol::parseLine(text);
        if (line.kind == headroom::protocol::Line::Kind::Progress)
            (void)headroom::protocol::describe(line.progress);
        if (line.kind == headroom::protocol::Line::Kind::Malformed && line.problem.find('\n') != std::string::npos)
            std::abort();
    });
}
