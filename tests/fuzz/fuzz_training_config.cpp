// A training config (--from, File → Import training config): YAML or JSON, any of five formats,
// and what export makes of it.
#include "fuzz.h"
#include "headroom/training_formats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return headroom::fuzz::guarded(data, size, [](const std::string &text) {
        const headroom::TrainingImport in = headroom::importTrainingConfig(text, "fuzz.yml");
        headroom::TrainingConfig c;
        in.settings.applyTo(c);
        c.validate();
        for (headroom::TrainingFormat f : headroom::kAllTrainingFormats)
            (void)headroom::exportTrainingConfig(f, in.settings.model.value_or("org/model"), c);
    });
}
