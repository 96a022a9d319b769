// Qwen3.5's checkpoints (Qwen/Qwen3.5-9B, -27B): a qwen3_5 config.json with a vision_config and a
// text_config. AutoModelForCausalLM builds Qwen3_5ForCausalLM from its text_config alone (the
// checkpoint's model.visual weights are ignored on load), so the row is qwen3_5_text's, read from
// text_config. Fine-tuning the vision tower too is Qwen3_5ForConditionalGeneration (issue 30).
#include "family.h"

namespace headroom {

const Family &family_qwen3_5()
{
    static const Family f = family_qwen3_5_text().derive("qwen3_5").set(&FamilyTraits::textConfigNested);
    return f;
}

} // namespace headroom
