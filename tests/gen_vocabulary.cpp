// The transformers engine's vocabulary (probes/hrengine/vocabulary.py), generated from core's
// tables (sharedVocabulary, domain/types.cpp). `gen_vocabulary FILE` exits 1 when FILE differs
// from what the tables say (ctest engine_vocabulary); `gen_vocabulary --write FILE` rewrites it.

#include "headroom/types.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {
std::string render()
{
    std::ostringstream o;
    o << "\"\"\"The names the engine shares with core, generated from core's tables (sharedVocabulary,\n"
         "core/domain/types.cpp) by tests/gen_vocabulary.cpp: do not edit; ctest engine_vocabulary fails\n"
         "when this file and the tables differ (gen_vocabulary --write rewrites it).\"\"\"\n";
    for (const auto &[name, values] : headroom::sharedVocabulary()) {
        o << "\n" << name << " = (";
        for (size_t i = 0; i < values.size(); ++i)
            o << (i ? ", " : "") << '"' << values[i] << '"';
        o << (values.size() == 1 ? ",)\n" : ")\n");
    }
    return o.str();
}
} // namespace

int main(int argc, char **argv)
{
    const bool write = argc == 3 && std::strcmp(argv[1], "--write") == 0;
    if (!(argc == 2 || write)) {
        std::fprintf(stderr, "usage: gen_vocabulary [--write] FILE\n");
        return 2;
    }
    const std::string path = argv[argc - 1];
    const std::string text = render();
    if (write) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << text;
        return out.good() ? 0 : 1;
    }
    std::ifstream in(path, std::ios::binary);
    std::string current(1 << 16, '\0');
    in.read(current.data(), static_cast<std::streamsize>(current.size()));
    current.resize(static_cast<size_t>(in.gcount()));
    if (current == text)
        return 0;
    std::fprintf(stderr, "%s differs from core's tables: run gen_vocabulary --write %s\n", path.c_str(), path.c_str());
    return 1;
}
